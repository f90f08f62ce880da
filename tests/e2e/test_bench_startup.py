"""`hpcdist bench startup` for real at 1 and 2 ranks: every row's jobs run, their ranks stamp their phases in order,
the JSON and the picture are written, and a row that runs past its timeout stops without hanging."""

from __future__ import annotations

import json
from pathlib import Path

from launching import launch

from hpcdist.bench.startup import PHASES, ROWS

# what each row's ranks pass, beside start and end
OWN_PHASES = {"pass": set(), "mpi": {"mpi"}, "torch": {"torch", "init", "barrier"}}


def test_every_row_at_1_and_2_ranks_stamps_its_phases_in_order(hpcdist: str, tmp_path: Path) -> None:
    picture, saved = tmp_path / "startup.png", tmp_path / "startup.json"
    argv = [hpcdist, "bench", "startup", "--ranks", "1,2", "--repeats", "1", "--json", "--plot", str(picture)]
    result = launch(argv, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    points = doc["results"]
    assert sorted((p["row"], p["ranks"]) for p in points) == sorted((row, n) for row in ROWS for n in (1, 2))
    assert doc["stops"] == []
    for p in points:
        phases = p["phases"]
        assert set(phases) == {"start", "end"} | OWN_PHASES[ROWS[p["row"]].mode], p
        ordered = [phases[name] for name in PHASES if name in phases]
        assert ordered[0] > 0 and ordered == sorted(ordered) and ordered[-1] <= p["wall"], p
        assert 0 < p["cpu_rank0"] <= p["cpu_ranks"] <= p["cpu_total"] and p["rss_mb"] > 10, p
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 20_000
    assert result.stderr.count(f"hpcdist bench: drew {picture}\n") == 1
    saved.write_text(result.stdout)
    again = launch([hpcdist, "bench", "startup", "--from", str(saved)], timeout=120)
    assert again.returncode == 0, again.stderr
    table = [line.split() for line in again.stdout.splitlines() if line.startswith("  ") and "ranks" not in line]
    assert sorted((cells[0], int(cells[1])) for cells in table if cells[1].isdigit()) == sorted(
        (row, n) for row in ROWS for n in (1, 2)
    )


def test_a_row_past_its_timeout_stops_there_and_says_why(hpcdist: str, tmp_path: Path) -> None:
    argv = [hpcdist, "bench", "startup", "--ranks", "1,2", "--rows", "hpcdist", "--repeats", "2", "--timeout", "0.2"]
    result = launch(argv, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "# hpcdist stopped at 1 ranks: ran past the 0.2 s timeout per job (see --timeout)" in result.stdout
    assert result.stderr.count("ran past the 0.2 s timeout") == 1  # one job ran; the row stopped there
    assert [line for line in result.stdout.splitlines() if line.startswith("  hpcdist")] == []
