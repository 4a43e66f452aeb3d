// cli: the OpenMPI peer of `fmstack bench comm`. Runs bench_mpi_coll
// (bench/mpi_coll.c) under mpirun through a sweep of sizes, inside one node
// (vader with CMA single copy, as OpenMPI recommends for large messages), on
// loopback (the tcp BTL) or across network namespaces (its daemons started
// in each namespace by a launch agent), and reads back its times.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>

namespace fmstack::cli {

// (op, bytes) -> seconds per call, the slowest rank's mean.
using CollectiveTimes = std::map<std::pair<std::string, size_t>, double>;

// The peer program and the sizes it sweeps (x4 apart, as the bench's own).
struct MpiSweep {
  std::string bench;  // path of bench_mpi_coll
  size_t min_bytes = 0, max_bytes = 0;
};

// mpirun with `btl` and extra --mca settings `mca`. Throws when mpirun
// fails, with its output; mpirun runs under a 30-minute deadline.
CollectiveTimes RunMpi(const MpiSweep& sweep, int n, const std::string& btl,
                       const std::string& mca = "");
// Inside one node: vader with CMA single copy, or vader's default where CMA
// is refused (a container); `config` names which ran.
CollectiveTimes RunMpiShm(const MpiSweep& sweep, int n, std::string* config);
// n nodes of one rank, each in its own network namespace (root); up to
// three starts of mpirun, each failure said on stderr.
CollectiveTimes RunMpiNetns(const MpiSweep& sweep, int n);
// mpirun --version's first line, or why it is unknown.
std::string MpiVersion();

}  // namespace fmstack::cli
