"""The web UI at `/ui`: the queue, one job, the clusters; server-rendered from templates in this package.

`cpn.ui.pages.mount_ui` adds it to the API's app (cpn.api.create_app); `cpn run` feeds the clusters page
with its latest inventory (cpn.ui.capacity.Capacity).
"""
