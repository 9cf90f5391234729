"""``score --help`` lists every estimator form ``score`` accepts, and every form it lists is accepted."""

from __future__ import annotations

import pytest

from whestboard.cli import main
from whestboard.scoring import ALIASES, BUILTIN_KINDS, is_file_spec, resolve_estimator


def score_help(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    return " ".join(capsys.readouterr().out.split())


def test_every_accepted_form_is_listed(capsys):
    text = score_help(capsys)
    for word in (*BUILTIN_KINDS, *ALIASES, "mc:N", "mc:0.5B", "PATH.py", "DIR (a folder with estimator.py",
                 "PATH.tar.gz", "PATH.tgz", "upload:SHA256"):
        assert word in text, word


def test_every_listed_form_is_accepted(tmp_path):
    for word in (*BUILTIN_KINDS, *ALIASES, "mc:1000", "mc:0.5B"):
        assert resolve_estimator(word).label
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "estimator.py").write_text("")
    for spec in (folder / "estimator.py", folder, tmp_path / "s.tar.gz", tmp_path / "s.tgz"):
        assert is_file_spec(str(spec)), spec
    assert is_file_spec("upload:" + "0" * 64)
