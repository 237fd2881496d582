"""A target whose root directory is replaced under it (deleted and made
again, as the old ``test_a_patch_over_ssh_does_what_a_local_patch_does``
did between its patches) refuses every operation and says what happened:
the root was replaced -- not that a parent is a symbolic link. Whether it
is noticed never depends on the new directory getting a new inode number
(the old test passed alone because a deleted root's inode was reused for
the new one at once, and failed under load when it was not)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mevedel_server.targets import (
    ControlProgram,
    MakeDirs,
    Read,
    RootReplacedError,
    UnsafePathError,
    raise_for_result,
)


def replace(root: Path) -> None:
    """Put a different directory (a new inode, always) in ``root``'s place."""
    fresh = root.with_name(root.name + ".new")
    (fresh / "d").mkdir(parents=True)
    (fresh / "d" / "f").write_text("the new tree\n")
    shutil.rmtree(root)
    os.rename(fresh, root)


async def test_a_replaced_root_is_refused_saying_it_was_replaced(open_target, tmp_path):
    root = tmp_path / "workspace"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_text("the old tree\n")
    target = await open_target(root)
    read = Read("d/f")
    assert (await target.run(ControlProgram([read])))[0].value == b"the old tree\n"
    replace(root)
    for op in (Read("d/f"), MakeDirs("d/e")):
        result = (await target.run(ControlProgram([op])))[0]
        assert not result.ok
        assert result.reason.startswith("the target root was replaced"), result.reason
        assert "symbolic link" not in result.reason
        with pytest.raises(RootReplacedError) as refused:
            raise_for_result(op, result)
        assert isinstance(refused.value, UnsafePathError)  # it still fails closed
    assert not (root / "d" / "e").exists()  # nothing was done
    # A target opened anew serves the new directory.
    again = await open_target(root)
    assert (await again.run(ControlProgram([read])))[0].value == b"the new tree\n"
