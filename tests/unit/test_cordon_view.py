"""What the clusters page and `/metrics` say of the cards. A cordoned cluster stays visible: its nodes,
running jobs and cards are in the clusters page (marked cordoned, its free cards counted as such, its jobs
in the Gantt) and in `/metrics` (`cpn_gpus` with status `cordoned`, `cpn_cluster_cordoned`), while the
policies no longer see its nodes. Free cards no queued job can use are counted per node by why: CPU
room under the threshold, or a pool none of their kinds may use."""

from __future__ import annotations

from fastapi.testclient import TestClient

from cpn.adapters.clusters import ClusterSet
from cpn.api import create_app
from cpn.auth import ApiSecurity
from cpn.engine.scheduler import RoundResult
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.telemetry import Telemetry
from cpn.ui.capacity import Capacity, CardCounts, count_cards
from cpn.ui.pages import mount_ui

EAST = NodeState(Node("east", "e-0", "Tesla-V100-SXM2-16GB", 8, 16, 64, "training"), 2, 8, ("lab/run-1",))
WEST = NodeState(Node("west", "w-0", "Tesla-V100-SXM2-16GB", 4, 16, 64, "training"), 4)


class Gateway:
    """The inventory part of a cluster gateway: what ClusterSet asks for the nodes."""

    def inventory(self) -> tuple[NodeState, ...]:
        return (EAST, WEST)


def test_a_cordoned_clusters_nodes_leave_the_policies_but_not_what_people_see():
    gateway = Gateway()
    clusters = ClusterSet({"east": gateway, "west": gateway}, cordoned=["east"])
    assert [s.node.cluster for s in clusters.inventory()] == ["west"]
    assert [s.node.cluster for s in clusters.every_node()] == ["east", "west"]


def test_the_clusters_page_marks_a_cordoned_cluster_with_its_cards_jobs_and_a_gantt_legend(tmp_path, store):
    capacity = Capacity()
    for t in (10.0, 20.0):
        capacity.record((EAST, WEST), t, cordoned={"east"})
    assert capacity.view().counts == (
        CardCounts("east", "v100", free=0, used=6, unusable=0, cordoned=2),
        CardCounts("west", "v100", free=4, used=0, unusable=0, cordoned=0),
    )
    security = ApiSecurity.no_auth(allowed_hosts={"testserver"})
    app = mount_ui(create_app(store, security=security), store, security, capacity.view, now=lambda: 20.0)
    with TestClient(app) as client:
        page = client.get("/ui/clusters").text
    east_row = page.split('<tr data-cluster="east">')[1].split("</tr>")[0]
    assert '<strong class="cordoned">cordoned</strong>' in east_row
    cells = [cell.split(">")[-1] for cell in east_row.split("</td>")[2:9]]
    assert cells == ["0", "6", "0", "0", "0", "2", "8"]  # free, used, unusable: CPU, pool, memory; cordoned
    assert 'data-cluster="west"><td>west<' in page  # an active cluster is not marked
    assert 'data-job="lab/run-1"' in page.split('data-cluster="east" width')[1]  # its running job's bar
    assert 'id="gantt-legend"' in page and "on the cluster now" in page


def test_metrics_keep_a_cordoned_clusters_cards_and_say_it_is_cordoned(store):
    telemetry = Telemetry(store)
    cards = (CardCounts("east", "v100", 0, 6, 0, 2), CardCounts("west", "v100", 4, 0, 0, 0))
    telemetry.after_round(RoundResult(0.0, 0, 0, 0, 0, 0, 0), cards, cordoned={"east"})
    sample = telemetry.registry.get_sample_value
    assert sample("cpn_gpus", {"cluster": "east", "gpu_type": "v100", "status": "used"}) == 6
    assert sample("cpn_gpus", {"cluster": "east", "gpu_type": "v100", "status": "cordoned"}) == 2
    assert sample("cpn_cluster_cordoned", {"cluster": "east"}) == 1
    assert sample("cpn_cluster_cordoned", {"cluster": "west"}) == 0


def test_free_cards_no_queued_job_can_use_are_counted_per_node_by_cause():
    """The lab's defaults: 22 free cards, jobs of 4 cores per card waiting on `cpu-threshold`. A node whose
    jobs leave 2.8 cores under the threshold serves none of its free cards; one leaving 9 cores serves 2 of
    4; an inference node serves no training job."""
    node = Node("c", "t-0", "Tesla-V100-SXM2-16GB", 8, 16, 32, "training")
    tight = NodeState(node, 4, cpu_used=26.0)  # cap 0.9 * 32 = 28.8: 2.8 left
    roomy = NodeState(Node("c", "t-1", "Tesla-V100-SXM2-16GB", 8, 16, 32, "training"), 4, cpu_used=19.8)
    serving = NodeState(Node("c", "i-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "inference"), 4)
    queue = [
        JobSpec("lab/a", "ResNet-50", num_gpus=1, cpu=4.0),
        JobSpec("lab/b", "ResNet-50", num_gpus=2, cpu=10),
    ]
    (counts,) = count_cards((tight, roomy, serving), 0.9, queued=queue)
    assert (counts.free, counts.used, counts.unusable, counts.pool, counts.total) == (2, 8, 6, 4, 20)
    (idle,) = count_cards((tight, roomy, serving), 0.9)  # no queue: only a node with no CPU left blocks
    assert (idle.free, idle.unusable, idle.pool) == (12, 0, 0)
    gang = [JobSpec("lab/g", "ResNet-50", num_gpus=8, cpu=8.0)]  # fits no node's free cards: not a CPU wait
    (waiting_on_gang,) = count_cards((tight,), 0.9, queued=gang)
    assert (waiting_on_gang.free, waiting_on_gang.unusable) == (4, 0)
    big = [JobSpec("lab/m", "ResNet-50", num_gpus=1, cpu=1.0, gpu_mem_gb=24.0)]  # more than a 16 GB card
    (too_small,) = count_cards((tight, roomy), 0.9, queued=big)
    assert (too_small.free, too_small.unusable, too_small.memory) == (0, 0, 8)
