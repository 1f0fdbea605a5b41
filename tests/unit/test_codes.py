"""Every code has one meaning, and docs/codes.md says exactly what the registry says."""

from __future__ import annotations

import re

from quarantine_assets.codes import REGISTRY, codes_document
from quarantine_assets.settings import REPO_ROOT

CODE = re.compile(r"^QA-(CFG|TBL|DQ|OPS|OWN|RUN|SRC)-\d{3}$")


def test_every_code_is_well_formed_and_means_one_thing():
    assert all(CODE.match(code) for code in REGISTRY)
    assert len(set(REGISTRY.values())) == len(REGISTRY)


def test_the_codes_page_lists_every_code_with_its_registered_meaning():
    page = (REPO_ROOT / "docs" / "codes.md").read_text(encoding="utf-8")
    assert page == codes_document(), "docs/codes.md is not current: python -m quarantine_assets.codes > docs/codes.md"
