// libFuzzer target: any bytes as a job file. Every outcome must be a parsed
// spec or fmstack::Error (a SpecError naming file:line and key); anything
// else (another exception, a crash, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "catalog/catalog.h"
#include "spec/job_spec.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fmstack::catalog::Catalog* catalog =
      new fmstack::catalog::Catalog(fmstack::catalog::Catalog::LoadEmbedded());
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)fmstack::spec::ParseJobSpec(text, "fuzz.toml", *catalog);
  } catch (const fmstack::Error&) {
    // The expected way to refuse input.
  }
  return 0;
}
