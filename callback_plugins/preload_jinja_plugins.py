"""Load the Jinja filter and test plugins once, in the controller, before any worker forks.

Ansible finds a playbook's filters the first time a process templates one: it imports every
filter plugin file (ours pulls in the `provisioner` package and prometheus_client). The
controller process rarely templates a filter itself, so without this every forked task worker
(one per host per task) imported them all again: a third of a no-op apply's CPU. Loaded here,
the workers inherit them.
"""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

DOCUMENTATION = """
    name: preload_jinja_plugins
    type: aggregate
    short_description: load Jinja filter and test plugins in the controller before workers fork
    description:
        - Loads every filter and test plugin of the configured plugin paths when the playbook starts,
          so that forked task workers inherit them instead of importing them once per task and host.
"""


class CallbackModule(CallbackBase):
    """Warms the controller's Jinja plugin cache at playbook start."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "preload_jinja_plugins"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_start(self, playbook: object) -> None:
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():
                pass
