"""hpcdist.submit beyond Slurm, without a server: each scheduler's submit, state and cancel command lines, the reading
of what its clients print, the choice of scheduler from PATH, the job scripts, and the errors before anything runs.

Grid Engine's outputs are those Son of Grid Engine 8.1.9 printed in tests/gridengine's cell (its real run:
tests/gridengine/test_submit_gridengine.py). The others are their documentation's forms:
- PBS: `qstat -f -F json` (PBS Professional 2022.1 Reference Guide, qstat, "-F json": an object with timestamp,
  pbs_version, pbs_server and Jobs, each job by its full id with its attributes, job_state and, once finished,
  Exit_status; job states in "Job States"; exit status -29 is JOB_EXEC_KILL_WALLTIME in "Job Exit Status Codes"),
  and `qstat: Unknown Job Id ID` for a job the server does not know.
- LSF: `bjobs -noheader -o "stat" ID` (IBM Spectrum LSF 10.1.0, bjobs -o: the field `stat`; -noheader: no header
  line) prints the state alone (bjobs, "Job status": PEND, PROV, PSUSP, RUN, USUSP, SSUSP, DONE, EXIT, UNKWN, WAIT,
  ZOMBI), and `Job <ID> is not found` for a job it no longer knows; bsub prints `Job <ID> is submitted to queue <Q>.`.
- Flux: `flux jobs -n -o "{status}" ID` (flux-core flux-jobs(1), OUTPUT FORMAT: `status` is PENDING, RUNNING,
  COMPLETED, FAILED, CANCELED or TIMEOUT), and `flux batch` prints the job id in RFC 19's F58 encoding (flux-batch(1)).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hpcdist
from hpcdist.errors import UsageError
from hpcdist.jobs import scripts
from hpcdist.launching.world import World
from hpcdist.schedulers import lookup, on_path

# qstat in the cell (Son of Grid Engine 8.1.9), a job transferring to its hosts and others pending, held, in error
QSTAT = """\
job-ID  prior   name       user         state submit/start at     queue                          slots ja-task-ID 
-----------------------------------------------------------------------------------------------------------------
      1 0.55500 s.sh       root         t     11/30/2026 19:29:24 all.q@n1                           2        
      2 0.55500 train      root         r     11/30/2026 19:29:25 all.q@n2                           2        
     12 0.00000 wait       root         qw    11/30/2026 19:29:26                                    4        
     13 0.00000 held       root         hqw   11/30/2026 19:29:26                                    4        
     14 0.00000 broken     root         Eqw   11/30/2026 19:29:26                                    4        
     15 0.55500 paused     root         s     11/30/2026 19:29:24 all.q@n1                           2        
"""  # noqa: W291 (qstat pads its columns)


def pbs_json(state: str, **attributes: object) -> str:
    """What `qstat -f -F json 1234` prints for one job (PBS Professional 2022.1's form)."""
    job = {"Job_Name": "where", "Job_Owner": "alice@login1", "job_state": state, "queue": "workq", **attributes}
    return json.dumps(
        {"timestamp": 1669836000, "pbs_version": "2022.1.0", "pbs_server": "pbs01", "Jobs": {"1234.pbs01": job}},
        indent=4,
    )


@pytest.mark.parametrize(
    ("scheduler", "submit", "state", "cancel"),
    [
        ("slurm", ("sbatch", "--parsable", "job.sh"), None, None),
        ("gridengine", ("qsub", "job.sh"), ("qstat",), ("qdel", "7")),
        ("pbs", ("qsub", "job.sh"), ("qstat", "-x", "-f", "-F", "json", "7"), ("qdel", "7")),
        ("lsf", ("bsub",), ("bjobs", "-noheader", "-o", "stat", "7"), ("bkill", "7")),
        ("flux", ("flux", "batch", "job.sh"), ("flux", "jobs", "-n", "-o", "{status}", "7"), ("flux", "cancel", "7")),
    ],
)
def test_each_scheduler_s_command_lines(scheduler: str, submit, state, cancel) -> None:
    words = lookup(scheduler)
    assert words.submit_argv("job.sh") == submit
    assert words.script_on_stdin == (scheduler == "lsf")  # bsub reads #BSUB lines from stdin only
    if state is not None:
        assert (words.state_argv("7"), words.cancel_argv("7")) == (state, cancel)


@pytest.mark.parametrize(
    ("job", "expected"),
    [("1", "RUNNING"), ("2", "RUNNING"), ("12", "PENDING"), ("13", "PENDING"), ("14", "PENDING"),
     ("15", "SUSPENDED"), ("3", None), ("123", None)],
)  # fmt: skip
def test_grid_engine_s_state_is_the_state_column_of_its_row_and_none_when_it_has_ended(job: str, expected) -> None:
    assert lookup("gridengine").job_state(job, 0, QSTAT, "") == expected
    assert lookup("gridengine").job_state(job, 0, "", "") is None  # no jobs at all: qstat prints nothing


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (pbs_json("Q"), "PENDING"),
        (pbs_json("H"), "PENDING"),
        (pbs_json("R", exec_host="node1/0*4+node2/0*4"), "RUNNING"),
        (pbs_json("E"), "RUNNING"),
        (pbs_json("S"), "SUSPENDED"),
        (pbs_json("F", Exit_status=0), "COMPLETED"),
        (pbs_json("F", Exit_status=1), "FAILED"),
        (pbs_json("F", Exit_status=271), "FAILED"),  # 256 + SIGTERM: qdel'd while running
        (pbs_json("F", Exit_status=-29), "TIMEOUT"),
        (json.dumps({"timestamp": 1, "pbs_version": "2022.1.0", "pbs_server": "pbs01", "Jobs": {}}), None),
    ],
)
def test_pbs_state_from_qstat_json_by_job_state_and_exit_status(output: str, expected) -> None:
    assert lookup("pbs").job_state("1234", 0, output, "") == expected  # the server names it 1234.pbs01


def test_pbs_unknown_job_is_none_and_other_failures_are_usage_errors() -> None:
    pbs = lookup("pbs")
    assert pbs.job_state("1234.pbs01", 153, "", "qstat: Unknown Job Id 1234.pbs01\n") is None
    with pytest.raises(UsageError, match=r"^`qstat -x -f -F json 9` failed \(qstat: cannot connect to server pbs01 "
                       r"\(errno=15010\)\); check that its server answers \(`qstat -B`\)"):  # fmt: skip
        pbs.job_state("9", 2, "", "qstat: cannot connect to server pbs01 (errno=15010)\n")
    with pytest.raises(UsageError, match=r"printed what is not PBS's JSON \('Job Id: 9'\); check that this is PBS"):
        pbs.job_state("9", 0, "Job Id: 9", "")


@pytest.mark.parametrize(
    ("stat", "expected"),
    [("PEND", "PENDING"), ("PROV", "PENDING"), ("WAIT", "PENDING"), ("RUN", "RUNNING"), ("PSUSP", "SUSPENDED"),
     ("USUSP", "SUSPENDED"), ("SSUSP", "SUSPENDED"), ("DONE", "COMPLETED"), ("EXIT", "FAILED"), ("UNKWN", "UNKNOWN"),
     ("ZOMBI", "UNKNOWN")],
)  # fmt: skip
def test_lsf_state_from_bjobs_stat(stat: str, expected: str) -> None:
    assert lookup("lsf").job_state("779469", 0, stat + "\n", "") == expected


def test_lsf_forgotten_job_is_none_and_what_bjobs_does_not_document_is_refused() -> None:
    lsf = lookup("lsf")
    assert lsf.job_state("779469", 255, "", "Job <779469> is not found\n") is None
    with pytest.raises(UsageError, match=r"printed 'JOBID STAT', not a job state of bjobs\(1\)"):
        lsf.job_state("779469", 0, "JOBID STAT\n", "")
    assert lsf.submitted("Job <779469> is submitted to queue <normal>.\n") == "779469"


@pytest.mark.parametrize(
    ("status", "expected"),
    [("PENDING", "PENDING"), ("RUNNING", "RUNNING"), ("COMPLETED", "COMPLETED"), ("FAILED", "FAILED"),
     ("CANCELED", "CANCELLED"), ("TIMEOUT", "TIMEOUT")],
)  # fmt: skip
def test_flux_status_in_the_handle_s_words(status: str, expected: str) -> None:
    assert lookup("flux").job_state("ƒM5k8m7m", 0, status + "\n", "") == expected


def test_flux_batch_prints_an_f58_id_and_an_unknown_job_is_none() -> None:
    flux = lookup("flux")
    assert flux.submitted("ƒM5k8m7m\n") == "ƒM5k8m7m"
    assert flux.submitted("fM5k8m7m\n") == "fM5k8m7m"  # F58 in ASCII, where the locale has no UTF-8
    with pytest.raises(UsageError, match=r"flux batch printed 'error: no resources' instead of a job id"):
        flux.submitted("error: no resources\n")
    assert flux.job_state("ƒM5k8m7m", 1, "", "flux-jobs: ERROR: ƒM5k8m7m: job not found\n") is None
    with pytest.raises(UsageError, match=r"check that its server answers \(`flux uptime`\)"):
        flux.job_state("ƒM5k8m7m", 1, "", "flux-jobs: ERROR: Unable to connect to Flux\n")


@pytest.mark.parametrize(
    ("commands", "expected"),
    [
        ({"sbatch"}, "slurm"),
        ({"sbatch", "qsub", "qconf", "pbsnodes", "flux"}, "slurm"),  # a Slurm site's wrappers and tools
        ({"qsub", "qconf"}, "gridengine"),
        ({"qsub", "pbsnodes"}, "pbs"),
        ({"bsub"}, "lsf"),
        ({"flux"}, "flux"),
    ],
)
def test_the_scheduler_is_the_one_whose_commands_are_on_path(commands: set[str], expected: str) -> None:
    assert on_path(commands.__contains__).name == expected


def test_several_schedulers_or_none_on_path_is_a_usage_error_naming_them() -> None:
    with pytest.raises(UsageError) as error:
        on_path({"qsub", "qconf", "pbsnodes"}.__contains__)
    assert str(error.value) == (
        "the commands of Grid Engine's (qsub qconf) and PBS's (qsub pbsnodes) are all on PATH, so which scheduler is "
        "meant is unclear; pass scheduler= one of 'flux', 'gridengine', 'lsf', 'pbs', 'slurm'"
    )
    with pytest.raises(UsageError, match=r"^no scheduler's commands are on PATH \(looked for Flux's flux, Grid "):
        on_path(lambda command: False)


def render(scheduler: str, tmp_path: Path, common: dict, **settings) -> tuple[str, int]:
    """The script hpcdist.submit would submit, and its ranks."""
    given = {"nodes": None, "ntasks_per_node": None, "time": None, "partition": None} | common
    directory = tmp_path / "where-abc"
    program = ("-m", "hpcdist.runtime.pycall", "call.pkl", "rank-{rank}.pkl")
    return scripts.render(scheduler, settings, given, program, directory, World.current(), lambda f: f"{f}=")


def test_scripts_speak_each_scheduler_s_words_for_nodes_tasks_time_and_partition(tmp_path: Path) -> None:
    common = {"nodes": 2, "ntasks_per_node": 4, "time": None, "partition": "debug"}
    text, ranks = render("pbs", tmp_path, common | {"time": "1:00:00"})
    assert ranks == 8
    for line in ("#PBS -l select=2:ncpus=4:mpiprocs=4", "#PBS -l walltime=1:00:00", "#PBS -N where", "#PBS -q debug",
                 f"#PBS -o {tmp_path}/where-abc/job.out", "#PBS -j oe"):  # fmt: skip
        assert f"\n{line}\n" in text, line
    text, ranks = render("lsf", tmp_path, common | {"time": "90"})
    assert ranks == 8
    for line in ("#BSUB -n 8", '#BSUB -R "span[ptile=4]"', "#BSUB -W 90", "#BSUB -q debug", "#BSUB -J where"):
        assert f"\n{line}\n" in text, line
    text, ranks = render("flux", tmp_path, common | {"time": "2h"})
    assert ranks == 8 and "\n# flux: -N 2\n# flux: -n 8\n# flux: -t 2h\n# flux: -q debug\n" in text, text
    assert "--mpi flux" in text and " -np 8 " in text
    text, ranks = render("gridengine", tmp_path, {"time": "0:10:00"}, pe=("mpi", "4-8"))
    assert ranks == 4 and "\n#$ -pe mpi 4-8\n#$ -l h_rt=0:10:00\n#$ -N where\n" in text, text
    assert f"\n#$ -o {tmp_path}/where-abc/job.out\n#$ -j y\n" in text, text
    assert f" --log-dir {tmp_path}/where-abc/logs " in text or f"--log-dir {tmp_path}/where-abc/logs" in text


def test_the_job_is_named_after_the_function_as_each_scheduler_allows(tmp_path: Path) -> None:
    directory = tmp_path / "_lambda_-k2j4x9"  # hpcdist.submit's directory for a lambda
    program = ("-m", "hpcdist.runtime.pycall")
    common = {"nodes": 1, "ntasks_per_node": 2, "time": None, "partition": None}
    text, _ = scripts.render("pbs", {}, common, program, directory, World.current(), lambda f: f"{f}=")
    assert "\n#PBS -N lambda_\n" in text


def test_a_pbs_select_statement_gives_the_ranks_itself(tmp_path: Path) -> None:
    text, ranks = render("pbs", tmp_path, {}, resources=("select=3:ncpus=8:mpiprocs=2",))
    assert ranks == 6 and "\n#PBS -l select=3:ncpus=8:mpiprocs=2\n" in text
    with pytest.raises(UsageError, match=r"resources= select statement and its nodes= or ntasks_per_node= both give"):
        render("pbs", tmp_path, {"nodes": 2}, resources=("select=3:ncpus=8:mpiprocs=2",))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"scheduler": "moab"}, "hpcdist.submit's scheduler='moab': hpcdist submits jobs to 'flux', 'gridengine', "
                                "'lsf', 'pbs', 'slurm'; pass one of them"),
        ({"scheduler": "kubernetes"}, "hpcdist.submit's scheduler='kubernetes': hpcdist submits jobs to 'flux'"),
        ({"scheduler": "gridengine", "gpus_per_node": "4"},
         "hpcdist.submit has no option gpus_per_node= for scheduler='gridengine' (Slurm takes it, not Grid Engine); "
         "Grid Engine's options are account, bind, "),
        ({"scheduler": "pbs", "pe": ("mpi", "4")},
         "hpcdist.submit has no option pe= for scheduler='pbs' (Grid Engine takes it, not PBS); PBS's options are "),
        ({"scheduler": "lsf", "queue": "q", "partition": "p"}, "partition= and queue= both set the job's partition"),
        ({"scheduler": "lsf", "runlimit": "60", "time": "30"}, "time= and runlimit= both set the job's time"),
        ({"scheduler": "pbs", "array": "0-3"}, "hpcdist.submit's array= is Slurm's only; submit one job per task "
                                               "under PBS"),
        ({"scheduler": "flux", "nslots": 4}, "hpcdist.submit sets nslots= itself: the ranks are nodes= x "),
        ({"scheduler": "gridengine", "output": "x"}, "hpcdist.submit sets output= itself: the job's output goes"),
        ({"scheduler": "gridengine", "pe": ("mpi",)}, "hpcdist.submit's pe=('mpi',) (tuple): it takes a pair (str, "
                                                      "str) or None"),
        ({"scheduler": "gridengine", "nodes": 2}, "2 ranks under Grid Engine need a parallel environment: pass"),
        ({"scheduler": "gridengine", "nodes": 0, "pe": ("mpi", "2")}, "nodes= must be from 1 to "),
        ({"scheduler": "pbs", "resources": ["walltime=banana", "select=1"]}, "-l walltime='banana' is not a PBS "),
        ({"scheduler": "flux", "nodes": 2, "requeue": True}, "Flux requeues no job; drop --requeue"),
    ],
)  # fmt: skip
def test_wrong_input_is_a_one_line_usage_error_before_anything_is_submitted(tmp_path: Path, options, expected):
    with pytest.raises(UsageError) as error:
        hpcdist.submit(print, 1, folder=tmp_path / "jobs", **options)
    assert expected in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "jobs").exists() or list((tmp_path / "jobs").iterdir()) == []


def test_without_the_scheduler_s_commands_submit_and_the_handle_say_which_is_missing(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UsageError) as error:
        hpcdist.submit(print, 1, scheduler="pbs", nodes=2, folder=tmp_path / "jobs")
    assert str(error.value) == "qsub not found on PATH; submit from a PBS login node"
    assert list((tmp_path / "jobs").iterdir()) == []  # its directory removed again
    with pytest.raises(UsageError, match=r"^bjobs not found on PATH; run this where LSF's commands are"):
        hpcdist.Job("779469", tmp_path, 2, scheduler="lsf").state()
    with pytest.raises(UsageError, match=r"^qdel not found on PATH; run this where Grid Engine's commands are"):
        hpcdist.Job("12", tmp_path, 2, scheduler="gridengine").cancel()
    assert not (tmp_path / "cancelled").exists()  # nothing was cancelled


def test_attach_finds_the_scheduler_in_job_json_and_slurm_in_older_records(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text('{"job_id": "12", "ranks": 2, "tasks": [], "scheduler": "gridengine"}')
    assert hpcdist.Job.attach(tmp_path).scheduler.name == "gridengine"
    (tmp_path / "job.json").write_text('{"job_id": "7", "ranks": 4, "tasks": []}')
    assert hpcdist.Job.attach(tmp_path).scheduler.name == "slurm"
