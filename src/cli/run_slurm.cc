#include "cli/run_slurm.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fmstack::cli {
namespace {

constexpr double kSlurmDeadline = 10;  // seconds any one Slurm command gets

// Copies what `path` gained since `*offset` to stdout.
void Relay(const std::string& path, std::streamoff* offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (end <= *offset) return;
  in.seekg(*offset);
  std::string data(static_cast<size_t>(end - *offset), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  *offset = end;
  std::cout << data << std::flush;
}

std::string RunState(const std::string& run_dir) {
  try {
    return ReadJsonFile(run_dir + "/run.json", 1 << 20).value("state", "");
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  std::string out = "'";
  for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int SubmitToSlurm(const SlurmSubmission& s) {
  const auto t0 = std::chrono::steady_clock::now();
  // Everything is checked before anything is submitted.
  cluster::PingController(kSlurmDeadline);
  const cluster::PartitionInfo p = cluster::FindPartition(s.partition, kSlurmDeadline);
  const int needed = s.nodes + s.spares;
  if (needed > p.total_nodes)
    throw Error(fmt::format(
        "partition '{}' has {} node(s) ({}); the job needs {} node(s) + {} spare(s) = {}", p.name,
        p.total_nodes, p.nodes, s.nodes, s.spares, needed));
  if (p.state != "UP")
    std::cerr << fmt::format("fmstack run: partition '{}' is {}: the job waits until it is UP\n",
                             p.name, p.state);

  const std::string dir = s.run_dir + "/slurm";
  std::filesystem::create_directories(dir);
  std::string script =
      "#!/bin/sh\n"
      "# Written by `fmstack run --backend slurm`. Slurm requeues this job when\n"
      "# its batch host fails; the supervisor then continues the run in its\n"
      "# directory, and the workers resume from the newest checkpoint.\n"
      "exec";
  for (const std::string& w : s.run_argv) script += " " + ShellQuote(w);
  script += "\n";
  const std::string path = dir + "/run.sbatch";
  {
    AtomicFileWriter w(path);
    w.Write(script.data(), script.size());
    w.Commit();
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::add);
  const std::string output = dir + "/slurm-%j.out";
  const std::string id = cluster::Submit({.job_name = s.job_name,
                                          .partition = p.name,
                                          .script = path,
                                          .output = output,
                                          .chdir = std::filesystem::current_path().string(),
                                          .nodes = s.nodes,
                                          .spares = s.spares,
                                          .gpus_per_node = s.gpus_per_node,
                                          .warn_seconds = s.warn_seconds},
                                         kSlurmDeadline);
  const std::string out_file = fmt::format("{}/slurm-{}.out", dir, id);
  std::cerr << fmt::format(
      "fmstack run: submitted Slurm job {} to partition '{}': {} node(s) + {} spare(s), "
      "checked and submitted in {:.2f} s; output {}\n",
      id, p.name, s.nodes, s.spares,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), out_file);
  { std::ofstream(dir + "/job_id") << id << "\n"; }
  if (s.detach) {
    std::cout << id << "\n";
    return 0;
  }
  std::cerr << fmt::format(
      "fmstack run: following job {} (Ctrl-C stops following, not the job: "
      "scancel {} does)\n",
      id, id);
  std::streamoff offset = 0;
  std::string last;
  int restarts = 0;
  cluster::JobStatus st;
  for (;;) {
    try {
      st = cluster::QueryJob(id, kSlurmDeadline);
    } catch (const std::exception& e) {
      std::cerr << "fmstack run: " << e.what() << " (trying again)\n";
    }
    Relay(out_file, &offset);
    const std::string now =
        !st.known ? "gone"
                  : fmt::format("{}{}", st.state,
                                st.state == "PENDING" ? " (" + st.reason + ")"
                                : st.state == "RUNNING"
                                    ? fmt::format(" on {} (batch host {})", st.nodes, st.batch_host)
                                    : "");
    if (st.restarts > restarts) {
      restarts = st.restarts;
      std::cerr << fmt::format("fmstack run: job {} was requeued by Slurm (restart {})\n", id,
                               restarts);
    }
    if (now != last) {
      std::cerr << fmt::format("fmstack run: job {}: {}\n", id, now);
      last = now;
    }
    if (st.finished()) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  // The batch host's last writes may reach a shared file system late.
  for (int i = 0; i < 20 && RunState(s.run_dir) == "running"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Relay(out_file, &offset);
  const std::string run = RunState(s.run_dir);
  std::cerr << fmt::format("fmstack run: job {} ended {}; the run is {}\n", id,
                           st.known ? st.state : "(Slurm forgot it)",
                           run.empty() ? "unknown (no run.json)" : run);
  return run == "finished" ? 0 : 1;
}

void UseAllocation(runtime::SuperviseOptions& o) {
  o.slurm = cluster::ReadAllocation(kSlurmDeadline);
  const int hosts = static_cast<int>(o.slurm.hosts.size());
  if (hosts < o.layout.nodes)
    throw Error(fmt::format("Slurm job {} has {} node(s) ({}...); the run needs {}", o.slurm.job_id,
                            hosts, o.slurm.hosts.front().name, o.layout.nodes));
  o.spares = hosts - o.layout.nodes;
  o.job_id = fmt::format("{}-{}", o.job_name, o.slurm.job_id);
  if (o.slurm.restart_count > 0) {
    o.resume_supervisor = true;
    std::cerr << fmt::format(
        "fmstack run: Slurm requeued job {} (restart {}): continuing the run in {}\n",
        o.slurm.job_id, o.slurm.restart_count, o.run_dir);
  }
  // A host released from the allocation cannot come back into it.
  o.node_repair_seconds = 0;
  std::string names;
  for (const cluster::SlurmHost& h : o.slurm.hosts) names += " " + h.name + "=" + h.addr;
  std::cerr << fmt::format("fmstack run: Slurm job {}: {} node(s) + {} spare(s):{}\n",
                           o.slurm.job_id, o.layout.nodes, o.spares, names);
}

}  // namespace fmstack::cli
