// comm: the socket descriptors this process has open, so that a
// communicator can tell which sockets a Gloo mesh opened (and shut them
// down on abort: Gloo itself has no abort).
#pragma once

#include <set>

namespace fmstack::comm {

std::set<int> OpenSockets();

}  // namespace fmstack::comm
