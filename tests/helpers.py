"""Helpers the test modules share: breaking an inventory copy, reading its problems, vault text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from ansible.parsing.vault import VaultLib, VaultSecret

from provisioner.errors import InputError
from provisioner.inventory.loader import load_inventory


def edit_yaml(path: Path, change: Callable[[dict], object]) -> None:
    """Load a YAML file, let `change` alter the document, write it back."""
    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def inventory_problems(directory: Path) -> list[str]:
    """The problems validation reports for the inventory (it must report some)."""
    with pytest.raises(InputError) as caught:
        load_inventory(str(directory))
    return [str(problem) for problem in caught.value.problems]


def one_problem(directory: Path, *fragments: str) -> str:
    """The first reported problem that mentions every fragment."""
    found = inventory_problems(directory)
    matching = [p for p in found if all(f in p for f in fragments)]
    assert matching, f"no problem mentions {fragments}; got {found}"
    return matching[0]


def vault_encrypt(text: str, password: str) -> str:
    """`text` encrypted as ansible-vault writes it, with the default vault id."""
    secret = VaultSecret(password.encode())
    return VaultLib([("default", secret)]).encrypt(text, secret).decode()


def last_record(runs: Path, command: str | None = None) -> Path:
    """The newest run record in `runs` (of `command`, e.g. "certify" or "upgrade-steps", if given)."""
    records = sorted(p for p in runs.iterdir() if command is None or p.name.endswith(f"-{command}"))
    assert records, f"no {command or ''} run record in {runs}"
    return records[-1]


def last_summary(runs: Path) -> dict:
    """The summary of the newest run record in `runs`."""
    from provisioner.ansible.records import read_summary

    return read_summary(last_record(runs))


def last_document(runs: Path, command: str, name: str) -> dict:
    """A JSON document (certification.json, replace-node.json, upgrade.json) of the newest record of command."""
    import json

    return json.loads((last_record(runs, command) / name).read_text())


class StandInCluster:
    """Stands in for the playbook runs (and the certification) of replace-node and upgrade, on
    a cluster without hosts: each playbook answers `answer(request)` (an exit code, or an
    exception to raise), slurm_states.yml and fleet_versions.yml hand back what those
    playbooks would (the busy nodes allocated, the unreachable nodes left out and counted
    unreachable), and every request is kept.

    install(monkeypatch) puts it in place of the real runs."""

    def __init__(self, nodes: tuple[str, ...] = ("gpu01", "gpu02"), unreachable: tuple[str, ...] = (),
                 answer: Callable[..., int | BaseException] | None = None):
        self.nodes, self.unreachable, self.answer = nodes, unreachable, answer
        self.busy: set[str] = set()
        # what a playbook's roles hand back with set_stats, by playbook
        self.recorded: dict[str, dict] = {}
        self.requests: list = []
        self.certified_pairs: list[list[str]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> StandInCluster:
        from provisioner.ansible import playbooks
        from provisioner.operations import lifecycle

        monkeypatch.setattr(playbooks, "run_playbook", self.run_playbook)
        monkeypatch.setattr(lifecycle, "run_certification", self.run_certification)
        return self

    def run_playbook(self, request, console=None):
        import json

        from provisioner.ansible.records import SUMMARY, new_record_dir
        from provisioner.ansible.runner import EXIT_FAILED, EXIT_OK, RunOutcome

        self.requests.append(request)
        record = new_record_dir(request.runs_dir, request.command)
        code = self.answer(request) if self.answer else EXIT_OK
        if isinstance(code, BaseException):
            raise code
        summary = {"hosts": {}, "hosts_failed": [], "hosts_unreachable": [],
                   "recorded": self.recorded.get(request.playbook, {})}
        if request.playbook == "slurm_states.yml":
            Path(request.extravars["_states_output"]).write_text(json.dumps({
                "sinfo": "".join(f"{node}|{'allocated' if node in self.busy else 'idle'}\n" for node in self.nodes),
                "reasons": "".join(f"{node}|none\n" for node in self.nodes)}))
        if request.playbook == "fleet_versions.yml":  # the unreachable left out of ansible_play_hosts
            answering = [node for node in self.nodes if node not in self.unreachable]
            Path(request.extravars["_fleet_output"]).write_text(json.dumps({"differences": [], "nodes": answering}))
            if self.unreachable:
                summary["hosts_unreachable"], code = list(self.unreachable), code or EXIT_FAILED
        (record / SUMMARY).write_text(json.dumps(summary))
        return RunOutcome(code, record, summary)

    def run_certification(self, request, console):
        from provisioner.ansible.runner import EXIT_OK

        self.certified_pairs.append(list(request.nodes))
        verdicts = {node: {"certified": True} for node in request.nodes}
        return EXIT_OK, request.runs_dir, {"certified": True, "node_verdicts": verdicts, "checks": []}

    def drains(self) -> list[dict]:
        return [r.extravars for r in self.requests if r.playbook == "drain.yml"]

    def touched(self, node: str) -> list[str]:
        """The playbooks that were limited to the node or drained, resumed or reserved it."""
        import json

        return [r.playbook for r in self.requests
                if node in (r.limit or "").split(",") or node in json.dumps(r.extravars)]
