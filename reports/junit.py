"""A small, generic JUnit XML writer: one ``<testsuite>``, one ``<testcase>`` per result."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

#: Characters XML 1.0 cannot carry; CI parsers reject documents that contain them.
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
MESSAGE_CHARS = 500  # characters of a failure message kept in the attribute


@dataclasses.dataclass(frozen=True, slots=True)
class JunitCase:
    """One test result."""

    name: str
    classname: str
    time: float = 0.0  # seconds
    failure: str | None = None  #: the failure message (the test ran and did not hold)
    failure_text: str = ""  #: details under the failure element
    error: str | None = None  #: the harness broke (the test could not be judged)
    error_text: str = ""
    skipped: str | None = None  #: why it was skipped
    system_out: str = ""
    failure_type: str = "AssertionError"


def _clean(text: str) -> str:
    return _ILLEGAL_XML.sub("\ufffd", text)


def junit_document(
    suite_name: str, cases: Sequence[JunitCase], timestamp: str | None = None
) -> str:
    """Return the JUnit XML document for ``cases``."""
    suite = ET.Element(
        "testsuite",
        {
            "name": suite_name,
            "tests": str(len(cases)),
            "failures": str(sum(c.failure is not None and c.error is None for c in cases)),
            "errors": str(sum(c.error is not None for c in cases)),
            "skipped": str(sum(c.skipped is not None for c in cases)),
            "time": f"{sum(c.time for c in cases):.3f}",
            "timestamp": timestamp
            or dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        },
    )
    for c in cases:
        node = ET.SubElement(
            suite,
            "testcase",
            {"classname": _clean(c.classname), "name": _clean(c.name), "time": f"{c.time:.3f}"},
        )
        if c.error is not None:
            err = ET.SubElement(node, "error", {"message": _clean(c.error[:MESSAGE_CHARS])})
            err.text = _clean(c.error_text or c.error)
        elif c.failure is not None:
            fail = ET.SubElement(
                node,
                "failure",
                {"message": _clean(c.failure[:MESSAGE_CHARS]), "type": c.failure_type},
            )
            fail.text = _clean(c.failure_text or c.failure)
        elif c.skipped is not None:
            ET.SubElement(node, "skipped", {"message": _clean(c.skipped[:MESSAGE_CHARS])})
        if c.system_out:
            ET.SubElement(node, "system-out").text = _clean(c.system_out)
    root = ET.Element("testsuites", {"name": suite_name})
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(path: str | Path, suite_name: str, cases: list[JunitCase]) -> Path:
    """Write ``cases`` as a JUnit XML file at ``path`` and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_document(suite_name, cases), encoding="utf-8")
    return path
