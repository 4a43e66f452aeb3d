// health: what a node agent serves at /metrics. Accelerators under
// dcgm-exporter's names and labels (so its dashboards and alerts work as
// they are), the host (memory, load, disk), and the agent's own checks.
#pragma once

#include <string>
#include <vector>

#include "health/agent.h"
#include "health/device.h"
#include "metrics/registry.h"

namespace fmstack::health {

// Declares the families; call once per registry.
void DeclareNodeSeries(metrics::Registry& m);

// Replaces the node's samples with these readings (devices that fell off
// the bus have no samples, as with dcgm-exporter) and the checks' verdicts.
void PublishNodeSeries(metrics::Registry& m, const std::string& hostname,
                       const std::vector<DeviceState>& devices,
                       const std::vector<Verdict>& verdicts, const std::string& disk_path);

}  // namespace fmstack::health
