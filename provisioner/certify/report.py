"""The certification's machine-readable reports: certification.json and JUnit XML (the page: report_html)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from provisioner.ansible.records import write_private


def write_json(path: Path, document: dict[str, Any]) -> Path:
    return write_private(path, json.dumps(document, indent=2) + "\n")


def write_junit(path: Path, document: dict[str, Any]) -> Path:
    """One test suite per node (plus `fleet`), one test case per check covering it."""
    suites = ET.Element("testsuites", name=f"certification {document['cluster']}")
    for node in [*document["nodes"], "fleet"]:
        checks = [c for c in document["checks"] if (node in c["nodes"]) or (node == "fleet" and len(c["nodes"]) > 1)]
        if node != "fleet":
            checks = [c for c in checks if len(c["nodes"]) == 1 or node in c["blamed"]]
        suite = ET.SubElement(suites, "testsuite", name=node, tests=str(len(checks)),
                              failures=str(sum(not c["passed"] for c in checks)))
        for check in checks:
            case = ET.SubElement(suite, "testcase", classname=f"certify.{node}", name=check["name"])
            text = (f"measured {check['measured']} {check['unit']}, threshold {check['threshold']}; "
                    f"{check['detail']}").strip()
            if not check["passed"]:
                failure = ET.SubElement(case, "failure", message=text[:300])
                failure.text = text
            else:
                ET.SubElement(case, "system-out").text = text
    ET.indent(suites)
    write_private(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True))
    return path
