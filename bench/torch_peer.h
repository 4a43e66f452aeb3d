// The PyTorch peers of bench_train and bench_gpu (bench/torch_gpt.py,
// bench/torch_ckpt_gpu.py), run in their own process under a deadline, their
// one JSON line read back.
#pragma once

#include <fmt/format.h>
#include <stdio.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "workload/shape.h"

namespace fmstack::bench {

struct TorchResult {
  double tokens_per_s = 0;  // 0: the peer failed, and its output was printed
  std::string about;        // version, BLAS, threads
};

// Runs `cmd` (its stderr folded into stdout) and returns the JSON object that
// starts at its output's last '{'; nullopt, with the output printed, when
// there is none.
inline std::optional<nlohmann::json> RunJsonPeer(const std::string& cmd) {
  struct Closer {
    void operator()(FILE* f) const { ::pclose(f); }
  };
  std::unique_ptr<FILE, Closer> pipe(::popen((cmd + " 2>&1").c_str(), "r"));
  std::string out;
  char buf[4096];
  size_t n = 0;
  while (pipe && (n = std::fread(buf, 1, sizeof(buf), pipe.get())) > 0) out.append(buf, n);
  const size_t brace = out.rfind('{');
  if (brace == std::string::npos) {
    std::cerr << "peer failed (" << cmd << "):\n" << out;
    return std::nullopt;
  }
  return nlohmann::json::parse(out.substr(brace));
}

// TCMalloc, which PyTorch's performance tuning guide recommends preloading
// for training on a CPU (its CPU section, "Switch Memory allocator"): "" when
// Debian's libtcmalloc-minimal4 is not installed. Under glibc's malloc the
// peer maps and faults in its large activations afresh every step;
// gpt2-124m trained 153-178 tokens/s that way and 189-208 with TCMalloc
// (Intel VM, alternated runs), gpt-mini the same either way.
inline std::string TcmallocPath() {
  for (const char* dir :
       {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"}) {
    const std::string path = std::string(dir) + "/libtcmalloc_minimal.so.4";
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      std::fclose(f);
      return path;
    }
  }
  return "";
}

// The model arguments bench/torch_gpt.py and bench/torch_ckpt_gpu.py take,
// as words (for exec) and as one string (for a shell command line).
inline std::vector<std::string> ModelArgv(const workload::TransformerShape& s, int64_t B,
                                          int64_t T) {
  std::vector<std::string> words;
  for (const auto& [flag, value] : {std::pair<const char*, int64_t>{"--layers", s.layers},
                                    {"--hidden", s.hidden},
                                    {"--heads", s.heads},
                                    {"--ffn", s.ffn_hidden},
                                    {"--vocab", s.vocab},
                                    {"--batch", B},
                                    {"--seq", T}}) {
    words.emplace_back(flag);
    words.push_back(std::to_string(value));
  }
  return words;
}
inline std::string ModelArgs(const workload::TransformerShape& s, int64_t B, int64_t T) {
  std::string line;
  for (const std::string& word : ModelArgv(s, B, T)) line += (line.empty() ? "" : " ") + word;
  return line;
}

// Runs `python script` on model s with B x T tokens, `steps` steps a round,
// `extra` appended (--device cuda, --rounds 3, ...), under `deadline_s`.
inline TorchResult RunTorchPeer(const std::string& env, const std::string& python,
                                const std::string& script, const workload::TransformerShape& s,
                                int64_t B, int64_t T, int64_t steps, int threads,
                                const std::string& extra, int deadline_s) {
  const std::optional<nlohmann::json> j =
      RunJsonPeer(fmt::format("{} timeout {} {} {} {} --steps {} --threads {} {}", env, deadline_s,
                              python, script, ModelArgs(s, B, T), steps, threads, extra));
  if (!j) return {};
  TorchResult r;
  r.tokens_per_s = j->at("tokens_per_s").get<double>();
  r.about = fmt::format("PyTorch {}, BLAS {}, {} threads, {}", j->at("torch").get<std::string>(),
                        j->at("blas").get<std::string>(), j->at("threads").get<int>(),
                        j->value("allocator", std::string("allocator not reported")));
  return r;
}

}  // namespace fmstack::bench
