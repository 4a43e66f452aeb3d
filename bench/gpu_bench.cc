// bench_gpu: the CUDA trainer's model step on one device, against the
// device's own limits, in one run:
//   - tokens/s of a training step (forward, backward, AdamW on the device,
//     as `fmstack train` runs one process), median of 3 rounds
//   - model FLOP/s (6 x matmul weights + attention per token) as MFU of the
//     device's dense bf16 peak from the catalog (issue 23's target: >= 45%
//     on an H100 with bf16) and of its fp32 peak
//   - cuBLAS sgemm on the model's MLP shape in the same math mode, and the
//     model's FLOP/s as a fraction of it
// Without a device it prints what was looked for and exits 2.
//   - in fp32 and TF32, cuBLAS on the same shape with bf16 operands too
//     (what --matmul bf16's linear layers run on)
// Usage: bench_gpu [--model gpt2-124m] [--batch 8] [--seq 1024] [--steps 10]
//        [--matmul fp32|tf32|bf16]
//        [--python python3] [--torch-script bench/torch_gpt.py] [--no-torch]
//        bench_gpu --checkpoint ...: issue 23's checkpoint figure instead: the
//        blocking part of a save from device memory (the trainer's own path,
//        train::CheckpointSnapshot then ckpt::Engine::Save) against a
//        device-to-host copy of the same bytes into pinned memory (target
//        <= 1.2x), median of 3 after a warm-up save; and, unless --no-torch,
//        PyTorch saving the same model's state (bench/torch_ckpt_gpu.py):
//        torch.save to a path, and DCP's async_save's blocking part
//        bench_gpu --profile ...: one warm step, then one step between
//        cudaProfilerStart and Stop, for `ncu --profile-from-start off`
//        (bench/ncu_table.py turns its CSV into a table of kernels).
#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "bench/median.h"
#include "bench/random_tokens.h"
#include "bench/torch_peer.h"
#include "catalog/catalog.h"
#include "ckpt/engine.h"
#include "ckpt/tier.h"
#include "gpt/cuda_runtime.h"
#include "gpt/model.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/token_file.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/random.h"
#include "util/text_table.h"
#include "workload/presets.h"

namespace {

using fmstack::bench::Median;

using namespace fmstack;
using Clock = std::chrono::steady_clock;

// The catalog entry whose alias the device's name contains ("NVIDIA H100 80GB
// HBM3" -> h100-80gb); null when none does.
const catalog::Accelerator* Match(const catalog::Catalog& cat, const std::string& device) {
  for (const catalog::Accelerator& a : cat.accelerators()) {
    for (const std::string& alias : a.aliases) {
      if (alias.size() >= 3 && device.find(alias) != std::string::npos) return &a;
    }
  }
  return nullptr;
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// PyTorch saving the same model's state (bench/torch_ckpt_gpu.py): rows of
// its blocking times against ours, `ours_s`.
void AddTorchCheckpointRows(TextTable& t, const std::string& python, const std::string& script,
                            const workload::TransformerShape& shape, int64_t batch, double ours_s) {
  const std::optional<nlohmann::json> j =
      bench::RunJsonPeer(fmt::format("timeout 900 {} {} {} --device cuda --rounds 3 --dir {}",
                                     python, script, bench::ModelArgs(shape, batch, shape.seq_len),
                                     std::filesystem::temp_directory_path().string()));
  if (!j) return;
  std::cout << fmt::format("peer: PyTorch {}, state {:.0f} MB\n", j->value("torch", "?"),
                           j->value("bytes", 0.0) / 1e6);
  const std::pair<const char*, const char*> rows[] = {
      {"torch_save_s", "PyTorch torch.save to a path (all of it)"},
      {"dcp_async_block_s", "PyTorch DCP async_save, blocking part"},
      {"dcp_async_pinned_block_s", "PyTorch DCP async_save, pinned staging, blocking"}};
  for (const auto& [key, label] : rows) {
    if (j->contains(key)) {
      const double s = j->at(key).get<double>();
      t.AddRow({label, fmt::format("{:.1f} ms", s * 1e3),
                fmt::format("ours {:.1f}x faster", s / ours_s),
                std::string_view(key) == "torch_save_s" ? ">= 5x" : ""});
    }
  }
  for (const auto& [key, value] : j->items()) {
    if (key.ends_with("_error") || key.ends_with("_api"))
      std::cout << "peer " << key << ": " << value.get<std::string>() << "\n";
  }
}

int CheckpointBench(const workload::TransformerShape& shape, int64_t batch, gpt::Matmul matmul,
                    const std::string& python, const std::string& torch_script) {
  const train::TokenFile data = bench::RandomTokenFile("/tmp/bench_gpu_tokens.bin", shape.vocab);
  train::TrainConfig config;
  config.shape = shape;
  config.backend = "cuda";
  config.matmul = matmul;
  config.micro_batch = batch;
  config.steps = 100;
  config.optim.lr = 1e-4;
  train::Trainer trainer(config, data);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "bench_gpu_ckpt";
  std::filesystem::remove_all(dir);
  std::vector<std::unique_ptr<ckpt::Tier>> tiers;
  tiers.push_back(ckpt::MakePosixTier("local", dir.string()));
  ckpt::Engine engine(std::move(tiers), {});
  std::vector<double> blocking;
  int64_t bytes = 0;
  for (int round = 0; round < 4; ++round) {  // the first allocates the pool
    trainer.Step();
    const auto t0 = Clock::now();
    const ckpt::Snapshot snap = train::CheckpointSnapshot(trainer);
    engine.Save(snap);
    const double seconds = SecondsSince(t0);
    if (round > 0) blocking.push_back(seconds);
    bytes = 0;
    for (const ckpt::TensorSlice& s : snap.slices) bytes += static_cast<int64_t>(s.data.size());
    for (const std::string& p : engine.Wait(600)) std::cerr << p << "\n";
  }
  // The same bytes from device memory into pinned host memory, alone.
  gpt::cuda::DeviceBuffer<char> device(static_cast<size_t>(bytes), "bench device state");
  gpt::cuda::PinnedBuffer<char> host(static_cast<size_t>(bytes), "bench pinned state");
  std::vector<double> copy;
  for (int round = 0; round < 4; ++round) {
    const auto t0 = Clock::now();
    gpt::cuda::Check(cudaMemcpy(host.data(), device.data(), host.bytes(), cudaMemcpyDeviceToHost),
                     "bench device-to-host copy");
    if (round > 0) copy.push_back(SecondsSince(t0));
  }
  std::filesystem::remove_all(dir);
  const double b = Median(blocking), c = Median(copy);
  TextTable t({"measure", "value", "ratio", "target"});
  t.AddRow({"state saved", fmt::format("{:.0f} MB", static_cast<double>(bytes) / 1e6), "", ""});
  t.AddRow({"blocking save (snapshot + Engine::Save)", fmt::format("{:.1f} ms", b * 1e3),
            fmt::format("{:.2f}x the copy", b / c), "<= 1.2x"});
  t.AddRow({"device-to-host copy, pinned", fmt::format("{:.1f} ms", c * 1e3),
            fmt::format("{:.1f} GB/s", static_cast<double>(bytes) / c / 1e9), ""});
  if (!torch_script.empty()) {
    const std::string script =
        (std::filesystem::path(torch_script).parent_path() / "torch_ckpt_gpu.py").string();
    AddTorchCheckpointRows(t, python, script, shape, batch, b);
  }
  std::cout << t.RenderText();
  return 0;
}

int Run(int argc, char** argv) {
  CLI::App app("bench_gpu: the CUDA model step against the device's peak and cuBLAS");
  std::string model = "gpt2-124m";
  int64_t batch = 8, seq = 1024, steps = 10,
          attention_blocks = gpt::ModelOptions{}.attention_blocks;
  std::string matmul_name = "fp32";
  bool profile = false, no_torch = false, checkpoint = false;
  std::string python = "python3";  // GPU machines' python3 is the one with CUDA PyTorch
  std::string torch_script = std::string(FMSTACK_SOURCE_DIR) + "/bench/torch_gpt.py";
  app.add_option("--model", model, "a preset (fmstack catalog list models)");
  app.add_option("--batch", batch, "sequences per micro-batch")->check(CLI::Range(1, 4096));
  app.add_option("--seq", seq, "tokens per sequence")->check(CLI::Range(1, 1 << 16));
  app.add_option("--steps", steps, "forward + backward passes per round")
      ->check(CLI::Range(1, 100000));
  app.add_option("--matmul", matmul_name,
                 "fp32, or fp32 values on tensor cores with operands rounded to tf32 or bf16")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  app.add_option("--attention-blocks", attention_blocks,
                 "causal blocks per sequence in attention's matmuls (1 = full T x T products)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--profile", profile, "run one warm step, then one step inside a profiler range");
  app.add_option("--python", python, "the Python that has CUDA PyTorch");
  app.add_option("--torch-script", torch_script, "the PyTorch peer (bench/torch_gpt.py)");
  app.add_flag("--no-torch", no_torch, "skip the PyTorch peer");
  app.add_flag("--checkpoint", checkpoint,
               "time a save's blocking part against the device-to-host copy alone");
  CLI11_PARSE(app, argc, argv);
  const gpt::Matmul matmul = *gpt::ParseMatmul(matmul_name);

  const gpt::cuda::DeviceProbe probe = gpt::cuda::ProbeDevices();
  if (probe.devices.empty()) {
    std::cerr << "bench_gpu: " << probe.why_none << "\n";
    return 2;
  }
  const gpt::cuda::DeviceInfo& dev = probe.devices.front();
  const std::optional<workload::TransformerShape> preset = workload::FindPreset(model);
  if (!preset) throw Error(fmt::format("--model: no preset \"{}\"", model));
  workload::TransformerShape shape = *preset;
  shape.seq_len = seq;
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  int cublas_version = 0;
  {
    gpt::cuda::Stream s("bench");
    gpt::cuda::Blas blas(s.get(), gpt::Matmul::kFp32);
    gpt::cuda::Cublas().get_version(blas.get(), &cublas_version);
  }
  std::cout << fmt::format(
      "device {} ({} SMs, sm_{}{}, {:.1f} GiB), CUDA runtime {}, driver {}, cuBLAS {}\n", dev.name,
      dev.multiprocessors, dev.sm_major, dev.sm_minor,
      static_cast<double>(dev.total_bytes) / (1 << 30), runtime, driver, cublas_version);
  std::cout << fmt::format(
      "model {} ({} layers, hidden {}), batch {} x {} tokens, {}, {}{}\n", shape.name, shape.layers,
      shape.hidden, batch, seq,
      matmul == gpt::Matmul::kFp32 ? std::string("fp32")
                                   : fmt::format("fp32 with {} matmuls", matmul_name),
      checkpoint ? "" : fmt::format("attention in {} causal blocks, ", attention_blocks),
      checkpoint ? "a warm-up save, then 3 saves, one step apart"
                 : fmt::format("{} steps x 3", steps));
  if (checkpoint) {
    return CheckpointBench(shape, batch, matmul, python, no_torch ? std::string() : torch_script);
  }
  auto m = gpt::CreateModel(shape, {.backend = "cuda",
                                    .matmul = matmul,
                                    .max_batch = batch,
                                    .attention_blocks = attention_blocks});
  gpt::InitParams(m->params_layout(), m->params(), 1);
  // As `fmstack train` runs one process: AdamW on the device, no host copies.
  const std::vector<uint8_t> decay = train::DecayMask(m->params_layout());
  m->EnableDeviceOptimizer({.decay_mask = decay});
  Rng rng(2);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * seq)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(shape.vocab)));
    targets[i] = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(shape.vocab)));
  }
  int64_t updates = 0;
  auto step = [&] {
    m->ZeroGrad();
    m->Forward(tokens, targets, batch, seq);
    m->Backward(1.0f);
    m->DeviceOptimizerStep(++updates, 1e-4);
  };
  step();  // warm: cuBLAS heuristics, first-touch of pinned memory
  if (profile) {
    gpt::cuda::Check(cudaProfilerStart(), "starting the profiler range");
    step();
    gpt::cuda::Check(cudaDeviceSynchronize(), "the profiled step");
    gpt::cuda::Check(cudaProfilerStop(), "stopping the profiler range");
    std::cout << "profiled one step\n";
    return 0;
  }
  std::vector<double> seconds;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) step();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count() /
                      static_cast<double>(steps));
    std::cerr << fmt::format("round {}/3: {:.1f} ms per step\n", round + 1, seconds.back() * 1e3);
  }
  const double step_s = Median(seconds);
  const double tokens_per_s = static_cast<double>(batch * seq) / step_s;
  const workload::TrainingFlops flops = workload::TrainingFlopsPerToken(shape);
  const double model_flops = tokens_per_s * flops.detailed;
  // The MLP's up-projection: (batch x seq, hidden) @ (hidden, ffn).
  const std::vector<gpt::GemmShape> mlp = {{batch * seq, shape.ffn_hidden, shape.hidden}};
  double gemm = 0, bf16_gemm = 0;
  {
    gpt::cuda::Stream stream("bench stream");
    gpt::cuda::Blas blas(stream.get(), matmul);
    bf16_gemm = 1e9 * gpt::cuda::Bf16GemmGflops(blas, stream, mlp);
    // The linear layers' own mode: bf16 operands in bf16 mode, else sgemm.
    gemm =
        matmul == gpt::Matmul::kBf16 ? bf16_gemm : 1e9 * gpt::cuda::SgemmGflops(blas, stream, mlp);
  }

  const catalog::Catalog cat = catalog::Catalog::LoadEmbedded();
  const catalog::Accelerator* acc = Match(cat, dev.name);
  TextTable t({"measure", "value", "ratio", "target"});
  t.AddRow({"step (median of 3)", fmt::format("{:.1f} ms", step_s * 1e3), "", ""});
  t.AddRow({"tokens/s", fmt::format("{:.0f}", tokens_per_s), "", ""});
  t.AddRow({"model FLOP/s", fmt::format("{:.1f} TFLOP/s", model_flops / 1e12), "", ""});
  t.AddRow({fmt::format("cuBLAS {}, MLP shape", matmul_name),
            fmt::format("{:.1f} TFLOP/s", gemm / 1e12),
            fmt::format("{:.2f} of it", model_flops / gemm), ""});
  if (matmul != gpt::Matmul::kBf16) {
    t.AddRow({"cuBLAS bf16, MLP shape", fmt::format("{:.1f} TFLOP/s", bf16_gemm / 1e12),
              fmt::format("{:.2f} of it", model_flops / bf16_gemm), ""});
  }
  if (acc != nullptr) {
    t.AddRow({fmt::format("MFU of {} bf16 peak", acc->name),
              fmt::format("{:.1f} TFLOP/s peak", acc->bf16_flops / 1e12),
              fmt::format("{:.1f}%", 100 * model_flops / acc->bf16_flops), ">= 45%"});
    t.AddRow({fmt::format("of {} fp32 peak", acc->name),
              fmt::format("{:.1f} TFLOP/s peak", acc->fp32_flops / 1e12),
              fmt::format("{:.1f}%", 100 * model_flops / acc->fp32_flops), ""});
  } else {
    t.AddRow({"MFU", "device not in the catalog", "", ">= 45%"});
  }
  int rc = 0;
  if (!no_torch) {
    const std::string mode = "--device cuda --rounds 3 --matmul " + matmul_name;
    for (const bool sdpa : {false, true}) {
      const bench::TorchResult peer =
          bench::RunTorchPeer("", python, torch_script, shape, batch, seq, steps, 1,
                              mode + (sdpa ? " --sdpa" : ""), 900);
      if (peer.tokens_per_s <= 0) {
        rc = 1;
        continue;
      }
      t.AddRow({sdpa ? "PyTorch, fused attention (SDPA)" : "PyTorch, same attention",
                fmt::format("{:.0f} tokens/s", peer.tokens_per_s),
                fmt::format("{:.2f}x it", tokens_per_s / peer.tokens_per_s), ""});
      if (!sdpa) std::cout << "peer: " << peer.about << "\n";
    }
  }
  std::cout << t.RenderText();
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_gpu: " << e.what() << "\n";
    return 1;
  }
}
