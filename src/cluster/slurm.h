// cluster: the Slurm backend. Outside an allocation fmstack checks the
// cluster (controller, partition, node count) and submits the run as one
// batch job (exclusive nodes, requeued when one of its nodes fails); inside it (SLURM_JOB_ID set)
// the supervisor runs on the batch host and starts every rank as its own srun step on its node. A
// node the supervisor finds lost is released from the job at once (the job shrinks), so Slurm,
// which notices later, has no reason to end it; a lost batch host takes the supervisor with it and
// Slurm requeues the job. Every call to a Slurm command has a deadline.
#pragma once

#include <string>
#include <vector>

namespace fmstack::cluster {

struct SlurmHost {
  std::string name, addr;  // NodeName and NodeAddr
};

struct SlurmAllocation {
  std::string job_id;
  std::vector<SlurmHost> hosts;  // SLURM_JOB_NODELIST, in its order
  std::string here;              // SLURMD_NODENAME: the batch host ("" in an salloc shell)
  int restart_count = 0;         // SLURM_RESTART_COUNT: requeues so far
  std::string master_addr;       // where the workers reach the supervisor
};

// The allocation this process runs in, from Slurm's environment and
// scontrol. Throws Error when there is none or scontrol fails.
SlurmAllocation ReadAllocation(double deadline_seconds);

// argv that runs one task on `host` as a step of the allocation (the
// task's stdout and stderr come back through srun's).
std::vector<std::string> SrunPrefix(const SlurmAllocation& a, const SlurmHost& host,
                                    const std::string& step_name);

// Whether slurmd on each host accepts a connection within the deadline (a
// node that lost power or its link does not), all at once: "" for one that
// does, else what failed.
std::vector<std::string> ProbeSlurmd(const std::vector<SlurmHost>& hosts, double deadline_seconds);

// Shrinks the running job `a` to `keep` (names): the nodes left out are
// released, so Slurm does not end the job when it finds them down later.
// Throws Error with scontrol's words.
void ShrinkAllocation(const SlurmAllocation& a, const std::vector<std::string>& keep,
                      double deadline_seconds);

// The submitting side.
struct PartitionInfo {
  std::string name, nodes, state;
  int total_nodes = 0;
  bool is_default = false;
};
// Throws Error when slurmctld does not answer within the deadline.
void PingController(double deadline_seconds);
// `name` "" = the default partition. Throws Error listing the partitions
// when there is no such one.
PartitionInfo FindPartition(const std::string& name, double deadline_seconds);

struct SubmitRequest {
  std::string job_name, partition, script, output, chdir;
  int nodes = 0;
  int spares = 0;         // wanted, not required: --nodes=N-(N+spares)
  int gpus_per_node = 0;  // --gres=gpu:N when > 0
  // --signal=B:USR1@N when > 0: the batch script (the supervisor) is warned
  // N seconds before the time limit and saves then (a termination notice).
  int warn_seconds = 0;
};
// sbatch; returns the job id. Throws Error with sbatch's words.
std::string Submit(const SubmitRequest& r, double deadline_seconds);

struct JobStatus {
  bool known = false;  // false once Slurm forgot the job (MinJobAge after its end)
  std::string state, reason, nodes, batch_host;
  int restarts = 0;
  bool finished() const;  // a terminal state
};
JobStatus QueryJob(const std::string& id, double deadline_seconds);
// "key=value" fields of one line of `scontrol show -o` output.
std::string ScontrolField(const std::string& line, const std::string& key);

}  // namespace fmstack::cluster
