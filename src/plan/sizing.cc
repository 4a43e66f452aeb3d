#include "plan/sizing.h"

#include <cmath>

#include "resilience/policy.h"

namespace fmstack::plan {

double WallSeconds(double accelerator_hours, int64_t accelerators) {
  return accelerator_hours * 3600.0 / static_cast<double>(accelerators);
}

int64_t AcceleratorsToFinish(double accelerator_hours, double seconds) {
  // A hair of tolerance so that an exact fit (e.g. 7.000000001) is not rounded up.
  return static_cast<int64_t>(std::ceil(accelerator_hours * 3600.0 / seconds - 1e-9));
}

double IntervalTenthOfMtti(double mtti_seconds) {
  return mtti_seconds / 10.0;
}

double IntervalYoungDaly(double save_seconds, double mtti_seconds) {
  return resilience::YoungDaly(save_seconds, mtti_seconds);
}

double CheckpointOverhead(double interval_seconds, double save_seconds, double mtti_seconds) {
  return save_seconds / interval_seconds + (interval_seconds / 2.0 + save_seconds) / mtti_seconds;
}

double BlockingSaveBandwidth(double checkpoint_bytes, double interval_seconds, double overhead) {
  return checkpoint_bytes / (interval_seconds * overhead);
}

double AsyncSaveBandwidth(double checkpoint_bytes, double interval_seconds, double overhead) {
  return checkpoint_bytes / (interval_seconds * (1.0 - overhead));
}

double StorageCapacity(double data_bytes, double checkpoint_bytes, int64_t generations) {
  return data_bytes + checkpoint_bytes * static_cast<double>(generations);
}

int64_t VcpuQuota(int64_t nodes, int64_t vcpus_per_node) {
  return nodes * vcpus_per_node;
}

double Cost(double instance_hours, double price_per_hour, double spot_fraction,
            double spot_discount) {
  return instance_hours * price_per_hour *
         ((1.0 - spot_fraction) + spot_fraction * (1.0 - spot_discount));
}

double InferenceBytes(double num_params, double bytes_per_param, double activation_bytes) {
  return num_params * bytes_per_param + activation_bytes;
}

}  // namespace fmstack::plan
