#include "health/node_metrics.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <fstream>

#include "health/checks.h"

namespace fmstack::health {
namespace {

const char* const kDeviceFamilies[][2] = {
    {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."},
    {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."},
    {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."},
    {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."},
    {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."},
    {"DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors."},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors."},
};

}  // namespace

void DeclareNodeSeries(metrics::Registry& m) {
  for (const auto& f : kDeviceFamilies) m.Gauge(f[0], f[1]);
  m.Gauge("fmstack_host_memory_available_bytes", "MemAvailable of /proc/meminfo");
  m.Gauge("fmstack_host_memory_total_bytes", "MemTotal of /proc/meminfo");
  m.Gauge("fmstack_host_load1", "1-minute load average");
  m.Gauge("fmstack_host_filesystem_avail_bytes",
          "space available to non-root users on the run directory's file system");
  m.Gauge("fmstack_health_check_ok", "1 when the check's newest run passed, 0 when it failed");
  m.Gauge("fmstack_health_check_duration_seconds", "how long the check's newest run took");
}

void PublishNodeSeries(metrics::Registry& m, const std::string& hostname,
                       const std::vector<DeviceState>& devices,
                       const std::vector<Verdict>& verdicts, const std::string& disk_path) {
  for (const auto& f : kDeviceFamilies) m.Clear(f[0]);
  for (const DeviceState& d : devices) {
    if (!d.present) continue;
    const metrics::Labels l = {
        {"gpu", std::to_string(d.index)},
        {"UUID", d.uuid},
        {"device", fmt::format("nvidia{}", d.index)},
        {"model_name", d.name},  // dcgm-exporter: modelName (promtool lints camelCase)
        {"Hostname", hostname}};
    m.Set("DCGM_FI_DEV_GPU_TEMP", l, d.temperature_c);
    m.Set("DCGM_FI_DEV_GPU_UTIL", l, d.utilization_pct);
    m.Set("DCGM_FI_DEV_FB_USED", l, d.fb_used_mib);
    m.Set("DCGM_FI_DEV_FB_FREE", l, std::max(0.0, d.fb_total_mib - d.fb_used_mib));
    m.Set("DCGM_FI_DEV_POWER_USAGE", l, d.power_w);
    m.Set("DCGM_FI_DEV_XID_ERRORS", l, d.xids.empty() ? 0 : d.xids.back());
    m.Set("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", l, static_cast<double>(d.ecc_sbe));
    m.Set("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", l, static_cast<double>(d.ecc_dbe));
  }
  const metrics::Labels host = {{"Hostname", hostname}};
  m.Set("fmstack_host_memory_available_bytes", host, MemInfoBytes("MemAvailable"));
  m.Set("fmstack_host_memory_total_bytes", host, MemInfoBytes("MemTotal"));
  std::ifstream load("/proc/loadavg");
  double load1 = 0;
  if (load >> load1) m.Set("fmstack_host_load1", host, load1);
  struct statvfs s {};
  if (!disk_path.empty() && ::statvfs(disk_path.c_str(), &s) == 0)
    m.Set("fmstack_host_filesystem_avail_bytes",
          {{"Hostname", hostname}, {"mountpoint", disk_path}},
          static_cast<double>(s.f_bavail) * static_cast<double>(s.f_frsize));
  m.Clear("fmstack_health_check_ok");
  m.Clear("fmstack_health_check_duration_seconds");
  for (const Verdict& v : verdicts) {
    const metrics::Labels l = {{"Hostname", hostname}, {"check", v.check}};
    m.Set("fmstack_health_check_ok", l, v.ok ? 1 : 0);
    m.Set("fmstack_health_check_duration_seconds", l, v.seconds);
  }
}

}  // namespace fmstack::health
