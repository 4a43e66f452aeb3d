#include "health/device.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "util/error.h"
#include "util/json_file.h"

namespace fmstack::health {

nlohmann::json ToJson(const DeviceState& d) {
  return {{"index", d.index},
          {"name", d.name},
          {"uuid", d.uuid},
          {"present", d.present},
          {"temperature_c", d.temperature_c},
          {"utilization_pct", d.utilization_pct},
          {"power_w", d.power_w},
          {"fb_used_mib", d.fb_used_mib},
          {"fb_total_mib", d.fb_total_mib},
          {"xid", d.xids},
          {"ecc_sbe", d.ecc_sbe},
          {"ecc_dbe", d.ecc_dbe},
          {"error", d.error}};
}

namespace {

// A file read may be made to block (a test's FIFO, a hung filesystem): that
// is what the agent's per-check deadline is for, not this code's concern.
constexpr size_t kMaxDeviceFile = 64 * 1024;

class NoDevices final : public DeviceSource {
 public:
  std::vector<DeviceState> Read() override { return {}; }
  std::string Describe() const override { return "none"; }
  int Count() const override { return 0; }
};

std::string FakePath(const std::string& dir, int index) {
  return fmt::format("{}/gpu{}.json", dir, index);
}

nlohmann::json HealthyFake(int index) {
  return {{"name", "fake H100 80GB"},
          {"uuid", fmt::format("GPU-fake-{:04d}", index)},
          {"present", true},
          {"temperature_c", 38},
          {"utilization_pct", 0},
          {"power_w", 70},
          {"fb_used_mib", 0},
          {"fb_total_mib", 81559},
          {"xid", nlohmann::json::array()},
          {"ecc_sbe", 0},
          {"ecc_dbe", 0}};
}

class FakeDevices final : public DeviceSource {
 public:
  FakeDevices(std::string dir, int count) : dir_(std::move(dir)), count_(count) {}

  std::vector<DeviceState> Read() override {
    std::vector<DeviceState> out;
    for (int i = 0; i < count_; ++i) out.push_back(ReadOne(i));
    return out;
  }
  std::string Describe() const override {
    return fmt::format("fake:{} ({} devices)", dir_, count_);
  }
  int Count() const override { return count_; }

 private:
  DeviceState ReadOne(int i) const {
    DeviceState d;
    d.index = i;
    const std::string path = FakePath(dir_, i);
    std::ifstream in(path);
    if (!in) {  // the device node is gone: fallen off the bus
      d.present = false;
      d.error = path + ": no such device file";
      return d;
    }
    std::string text(kMaxDeviceFile + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (text.size() > kMaxDeviceFile || j.is_discarded() || !j.is_object()) {
      d.error = path + ": not a JSON object of at most 64 KiB";
      return d;
    }
    try {
      d.name = j.value("name", "");
      d.uuid = j.value("uuid", "");
      d.present = j.value("present", true);
      d.temperature_c = j.value("temperature_c", 0.0);
      d.utilization_pct = j.value("utilization_pct", 0.0);
      d.power_w = j.value("power_w", 0.0);
      d.fb_used_mib = j.value("fb_used_mib", 0.0);
      d.fb_total_mib = j.value("fb_total_mib", 0.0);
      d.xids = j.value("xid", std::vector<int>{});
      if (d.xids.size() > 1024) d.xids.resize(1024);
      d.ecc_sbe = j.value("ecc_sbe", int64_t{0});
      d.ecc_dbe = j.value("ecc_dbe", int64_t{0});
    } catch (const std::exception& e) {
      d.error = fmt::format("{}: {}", path, e.what());
    }
    return d;
  }

  std::string dir_;
  int count_;
};

// NVML through dlopen: the driver's library exists only where a GPU does,
// and fmstack must start everywhere. The few types below are NVML's stable ABI.
class Nvml final : public DeviceSource {
 public:
  Nvml() {
    lib_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr)
      throw Error(fmt::format(
          "devices = \"nvml\": cannot load libnvidia-ml.so.1 (the NVIDIA driver's NVML): {}; on "
          "a node without GPUs use devices = \"none\"",
          ::dlerror()));
    Bind();
    Check(init_(), "nvmlInit_v2");
    unsigned n = 0;
    Check(count_(&n), "nvmlDeviceGetCount_v2");
    count_devices_ = static_cast<int>(n);
    if (event_set_create_(&events_) == 0) {
      for (int i = 0; i < count_devices_; ++i) {
        void* dev = nullptr;
        if (handle_(static_cast<unsigned>(i), &dev) == 0)
          (void)register_(dev, kXidCriticalError, events_);
      }
    }
    xids_.resize(static_cast<size_t>(count_devices_));
  }
  ~Nvml() override {
    if (shutdown_ != nullptr) shutdown_();
    if (lib_ != nullptr) ::dlclose(lib_);
  }

  std::vector<DeviceState> Read() override {
    const std::lock_guard lock(mu_);  // checks run on threads of their own
    DrainXidEvents();
    std::vector<DeviceState> out;
    for (int i = 0; i < count_devices_; ++i) {
      DeviceState d;
      d.index = i;
      d.xids = xids_[static_cast<size_t>(i)];
      void* dev = nullptr;
      const int rc = handle_(static_cast<unsigned>(i), &dev);
      if (rc != 0) {
        d.present = rc != kErrorGpuIsLost;
        d.error = fmt::format("nvmlDeviceGetHandleByIndex_v2({}): error {}", i, rc);
        out.push_back(d);
        continue;
      }
      char buf[96] = {};
      if (name_(dev, buf, sizeof buf) == 0) d.name = buf;
      if (uuid_(dev, buf, sizeof buf) == 0) d.uuid = buf;
      unsigned v = 0;
      const int t = temperature_(dev, 0, &v);
      if (t == kErrorGpuIsLost) d.present = false;
      if (t == 0) d.temperature_c = v;
      if (power_(dev, &v) == 0) d.power_w = v / 1000.0;
      Utilization u{};
      if (utilization_(dev, &u) == 0) d.utilization_pct = u.gpu;
      Memory m{};
      if (memory_(dev, &m) == 0) {
        d.fb_used_mib = static_cast<double>(m.used) / (1 << 20);
        d.fb_total_mib = static_cast<double>(m.total) / (1 << 20);
      }
      unsigned long long ecc = 0;
      if (ecc_(dev, 0, 0, &ecc) == 0) d.ecc_sbe = static_cast<int64_t>(ecc);
      if (ecc_(dev, 1, 0, &ecc) == 0) d.ecc_dbe = static_cast<int64_t>(ecc);
      out.push_back(d);
    }
    return out;
  }
  std::string Describe() const override { return fmt::format("nvml ({} devices)", count_devices_); }
  int Count() const override { return count_devices_; }

 private:
  static constexpr int kErrorGpuIsLost = 15;
  static constexpr unsigned long long kXidCriticalError = 0x8;
  struct Utilization {
    unsigned gpu, memory;
  };
  struct Memory {
    unsigned long long total, free, used;
  };
  struct EventData {
    void* device;
    unsigned long long type, data;
    unsigned gpu_instance, compute_instance;
  };

  template <typename F>
  void Sym(F& f, const char* name) {
    f = reinterpret_cast<F>(::dlsym(lib_, name));
    if (f == nullptr) throw Error(fmt::format("libnvidia-ml.so.1 has no {}", name));
  }
  void Bind() {
    Sym(init_, "nvmlInit_v2");
    Sym(shutdown_, "nvmlShutdown");
    Sym(count_, "nvmlDeviceGetCount_v2");
    Sym(handle_, "nvmlDeviceGetHandleByIndex_v2");
    Sym(name_, "nvmlDeviceGetName");
    Sym(uuid_, "nvmlDeviceGetUUID");
    Sym(temperature_, "nvmlDeviceGetTemperature");
    Sym(power_, "nvmlDeviceGetPowerUsage");
    Sym(utilization_, "nvmlDeviceGetUtilizationRates");
    Sym(memory_, "nvmlDeviceGetMemoryInfo");
    Sym(ecc_, "nvmlDeviceGetTotalEccErrors");
    Sym(event_set_create_, "nvmlEventSetCreate");
    Sym(register_, "nvmlDeviceRegisterEvents");
    Sym(wait_, "nvmlEventSetWait_v2");
  }
  void Check(int rc, const char* call) const {
    if (rc != 0) throw Error(fmt::format("NVML: {} failed with error {}", call, rc));
  }
  // Xids arrive as events: take what is queued without waiting.
  void DrainXidEvents() {
    if (events_ == nullptr) return;
    for (int n = 0; n < 256; ++n) {
      EventData e{};
      if (wait_(events_, &e, 0) != 0) return;
      for (int i = 0; i < count_devices_; ++i) {
        void* dev = nullptr;
        if (handle_(static_cast<unsigned>(i), &dev) == 0 && dev == e.device)
          xids_[static_cast<size_t>(i)].push_back(static_cast<int>(e.data));
      }
    }
  }

  std::mutex mu_;
  void* lib_ = nullptr;
  void* events_ = nullptr;
  int count_devices_ = 0;
  std::vector<std::vector<int>> xids_;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned*) = nullptr;
  int (*handle_)(unsigned, void**) = nullptr;
  int (*name_)(void*, char*, unsigned) = nullptr;
  int (*uuid_)(void*, char*, unsigned) = nullptr;
  int (*temperature_)(void*, int, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  int (*utilization_)(void*, Utilization*) = nullptr;
  int (*memory_)(void*, Memory*) = nullptr;
  int (*ecc_)(void*, int, int, unsigned long long*) = nullptr;
  int (*event_set_create_)(void**) = nullptr;
  int (*register_)(void*, unsigned long long, void*) = nullptr;
  int (*wait_)(void*, EventData*, unsigned) = nullptr;
};

}  // namespace

std::unique_ptr<DeviceSource> OpenDevices(const std::string& spec) {
  if (spec.empty() || spec == "none") return std::make_unique<NoDevices>();
  if (spec == "nvml") return std::make_unique<Nvml>();
  if (spec.starts_with("fake:")) {
    // fake:DIR holds gpu0.json, gpu1.json, ...: the count is what exists now.
    const std::string dir = spec.substr(5);
    if (dir.empty() || !std::filesystem::is_directory(dir))
      throw Error(fmt::format("devices = \"{}\": {} is not a directory", spec, dir));
    int count = 0;
    while (count < 1024 && std::filesystem::exists(FakePath(dir, count))) ++count;
    return std::make_unique<FakeDevices>(dir, count);
  }
  throw Error(fmt::format("devices = \"{}\": expected \"none\", \"nvml\" or \"fake:DIR\"", spec));
}

void ResetFakeDevices(const std::string& dir, int count) {
  std::filesystem::create_directories(dir);
  for (int i = 0; i < count; ++i) WriteJsonFile(FakePath(dir, i), HealthyFake(i));
}

void RaiseOnFakeDevice(const std::string& dir, int index, const nlohmann::json& change) {
  const std::string path = FakePath(dir, index);
  std::ifstream in(path);
  nlohmann::json j = in ? nlohmann::json::parse(in, nullptr, false) : HealthyFake(index);
  if (j.is_discarded() || !j.is_object())
    throw Error(fmt::format("{}: not a fake device file (a JSON object)", path));
  for (const auto& [key, value] : change.items()) {
    if (key == "xid") {
      j["xid"].push_back(value);  // Xids accumulate, as a driver's log does
    } else {
      j[key] = value;
    }
  }
  WriteJsonFile(path, j);
}

}  // namespace fmstack::health
