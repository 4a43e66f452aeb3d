// plan: the sizing formulas, as pure functions of numbers, so each seed
// example can be checked on its own. Seconds, bytes, FLOP, USD throughout.
#pragma once

#include <cstdint>

namespace fmstack::plan {

// Wall time for `accelerator_hours` of work spread over `accelerators`.
double WallSeconds(double accelerator_hours, int64_t accelerators);

// Fewest accelerators that finish `accelerator_hours` of work within `seconds`.
int64_t AcceleratorsToFinish(double accelerator_hours, double seconds);

// The seeds' rule of thumb: checkpoint every MTTI / 10.
double IntervalTenthOfMtti(double mtti_seconds);

// Young/Daly first-order optimum sqrt(2 * C * MTTI), C = blocking save time.
double IntervalYoungDaly(double save_seconds, double mtti_seconds);

// Expected share of time lost with interval T, save cost C and MTTI M:
// C/T (saving) + (T/2 + C)/M (recomputing half an interval and re-saving after a failure).
double CheckpointOverhead(double interval_seconds, double save_seconds, double mtti_seconds);

// Write bandwidth for a blocking save that may take `overhead` of each interval.
double BlockingSaveBandwidth(double checkpoint_bytes, double interval_seconds, double overhead);

// Write bandwidth for an asynchronous save that must finish within the
// interval, less the `overhead` share kept as margin (the seeds' formula).
double AsyncSaveBandwidth(double checkpoint_bytes, double interval_seconds, double overhead);

// Data plus `generations` checkpoints.
double StorageCapacity(double data_bytes, double checkpoint_bytes, int64_t generations);

// vCPUs to request as quota for `nodes` instances.
int64_t VcpuQuota(int64_t nodes, int64_t vcpus_per_node);

// Cost of `instance_hours` with a share on Spot at (1 - spot_discount) x price.
double Cost(double instance_hours, double price_per_hour, double spot_fraction,
            double spot_discount);

// Inference memory: weights at `bytes_per_param` plus activations / KV cache.
double InferenceBytes(double num_params, double bytes_per_param, double activation_bytes);

}  // namespace fmstack::plan
