#include "comm/open_sockets.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

namespace fmstack::comm {

std::set<int> OpenSockets() {
  std::set<int> fds;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) fds.insert(fd);
  }
  return fds;
}

}  // namespace fmstack::comm
