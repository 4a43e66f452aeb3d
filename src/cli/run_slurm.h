// cli (private): `fmstack run` on the Slurm backend. From a login node the
// run is checked against the cluster and submitted as one batch job whose
// script runs `fmstack run` again; inside the allocation that second
// `fmstack run` supervises the ranks, one srun step each.
#pragma once

#include <string>
#include <vector>

#include "runtime/supervisor.h"

namespace fmstack::cli {

struct SlurmSubmission {
  std::string job_name, partition;
  std::string run_dir;  // absolute
  int nodes = 0, spares = 0, gpus_per_node = 0;
  int warn_seconds = 0;  // the time limit's warning (SIGUSR1) comes this long before it
  std::vector<std::string> run_argv;  // what the batch script execs: fmstack run ...
  bool detach = false;                // print the job id and return
};

// Checks the controller, the partition and its size (each within seconds),
// writes RUN_DIR/slurm/run.sbatch, submits it and, unless detached, follows
// the job (its state and its output) to its end. Returns the exit status:
// 0 when the run finished.
int SubmitToSlurm(const SlurmSubmission& s);

// Inside the allocation: its hosts become the node slots (the rest after
// the job's nodes are spares) and a requeued job continues its run.
void UseAllocation(runtime::SuperviseOptions& o);

// Words quoted for sh.
std::string ShellQuote(const std::string& word);

}  // namespace fmstack::cli
