// health: the accelerators of one node, as the checks and the metrics see
// them. A small interface with three sources: NVML where a GPU and its driver
// exist, a directory of JSON files that tests and rehearsals edit to raise an
// Xid, an ECC error, heat or a device falling off the bus, and none (a CPU
// node). Field meanings follow dcgm-exporter's, so the metrics keep its names.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fmstack::health {

struct DeviceState {
  int index = 0;
  std::string name, uuid;
  bool present = true;  // false: fell off the bus (NVML: GPU_IS_LOST; fake: file gone)
  double temperature_c = 0;
  double utilization_pct = 0;
  double power_w = 0;
  double fb_used_mib = 0, fb_total_mib = 0;
  std::vector<int> xids;  // Xid codes seen since the node (or the source) started
  int64_t ecc_sbe = 0;    // corrected (single-bit) errors, volatile count
  int64_t ecc_dbe = 0;    // uncorrected (double-bit) errors, volatile count
  std::string error;      // why the state could not be read, "" when it could
};

class DeviceSource {
 public:
  virtual ~DeviceSource() = default;
  // The state of every device this source knows; never throws for a device
  // that is broken (that is what `present` and `error` say).
  virtual std::vector<DeviceState> Read() = 0;
  virtual std::string Describe() const = 0;  // "nvml (8 devices)", "fake:/dir (2 devices)"
  // Devices found when the source was opened, without reading them (a read
  // may block: that is for the checks, under their deadlines).
  virtual int Count() const = 0;
};

// "none", "nvml" or "fake:DIR". Throws Error naming the spec (or the NVML
// library and call) when the source cannot be opened.
std::unique_ptr<DeviceSource> OpenDevices(const std::string& spec);

// Fake devices: DIR/gpu<i>.json for i < count, written healthy (a fresh or
// repaired node). Throws Error naming the file it cannot write.
void ResetFakeDevices(const std::string& dir, int count);
// Edits one field group of a fake device file: {"xid": 79}, {"present": false},
// {"temperature_c": 95}, {"ecc_dbe": 1}. Throws Error naming the file.
void RaiseOnFakeDevice(const std::string& dir, int index, const nlohmann::json& change);

nlohmann::json ToJson(const DeviceState& d);

}  // namespace fmstack::health
