// What every verb that reads a job file does first.
#include <cstdlib>

#include "cli/commands.h"

namespace fmstack::cli {

catalog::Catalog LoadCatalog(const std::string& dir) {
  if (!dir.empty()) return catalog::Catalog::LoadDirectory(dir);
  if (const char* env = std::getenv("FMSTACK_CATALOG"); env != nullptr && *env != '\0') {
    return catalog::Catalog::LoadDirectory(env);
  }
  return catalog::Catalog::LoadEmbedded();
}

spec::JobSpec LoadJob(const std::string& job_path, const std::string& cluster_path,
                      const catalog::Catalog& catalog) {
  spec::JobSpec job = spec::LoadJobSpec(job_path, catalog);
  if (!cluster_path.empty()) {
    job.cluster = spec::LoadClusterSpec(cluster_path, catalog);
    spec::ResolveLayout(job, *job.cluster);
  }
  return job;
}

}  // namespace fmstack::cli
