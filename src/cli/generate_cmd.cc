// `fmstack generate --ckpt runs/JOB/ckpt --prompt "..."`: sample from a trained model.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <numeric>

#include "ckpt/restore.h"
#include "ckpt/tier.h"
#include "cli/commands.h"
#include "gpt/layout.h"
#include "gpt/model.h"
#include "gpt/sgemm_peak.h"
#include "train/tokenizer.h"
#include "train/train_state.h"
#include "util/error.h"
#include "util/random.h"

namespace fmstack::cli {
namespace {

struct GenerateArgs {
  std::string ckpt;
  std::string prompt = "\n";
  std::string tokenizer;  // default: the one recorded in the checkpoint
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 1;
  int threads = 0;
};

// Samples from softmax(logits / temperature) restricted to the top k.
int32_t Sample(std::span<const float> logits, double temperature, int64_t top_k, Rng& rng) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto k = static_cast<size_t>(std::clamp<int64_t>(top_k, 1, std::ssize(order)));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (temperature <= 0) return order[0];
  std::vector<double> p(k);
  for (size_t i = 0; i < k; ++i)
    p[i] = std::exp((logits[order[i]] - logits[order[0]]) / temperature);
  double u = rng.Uniform() * std::accumulate(p.begin(), p.end(), 0.0);
  for (size_t i = 0; i < k; ++i) {
    if ((u -= p[i]) <= 0) return order[i];
  }
  return order[k - 1];
}

int RunGenerate(const GenerateArgs& args) {
  gpt::SetCpuThreads(args.threads);
  // The newest committed step of a run's ckpt/ directory, or the step named.
  const ckpt::CheckpointDir dir = ckpt::OpenCheckpointDir(args.ckpt);
  std::optional<int64_t> step = dir.step;
  if (!step) {
    for (const ckpt::StepListing& l : dir.tier->List())
      if (l.committed && (!step || l.step > *step)) step = l.step;
    if (!step) throw Error(args.ckpt + ": no committed checkpoint");
  }
  const ckpt::Manifest manifest = ckpt::ReadManifest(*dir.tier, *step);
  workload::TransformerShape shape;
  try {
    shape = train::ShapeFromJson(manifest.model);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: the manifest of {} has no usable model shape ({})", args.ckpt,
                            ckpt::StepDirName(*step), e.what()));
  }
  const std::string data_dir = manifest.model.value("data_dir", "");
  if (args.tokenizer.empty() && data_dir.empty())
    throw Error(args.ckpt +
                ": the checkpoint does not say where its tokenizer is; pass --tokenizer");
  const std::string tok_path =
      args.tokenizer.empty() ? data_dir + "/tokenizer.bpe" : args.tokenizer;
  const train::BpeTokenizer tok = train::BpeTokenizer::Load(tok_path);
  if (tok.vocab_size() > shape.vocab) {
    throw Error(fmt::format("{}: vocabulary {} is larger than the model's {}", tok_path,
                            tok.vocab_size(), shape.vocab));
  }
  auto model = gpt::CreateModel(shape, {.max_batch = 1});
  // The weights only: the optimizer's moments stay on disk.
  std::vector<ckpt::TensorTarget> targets;
  for (const gpt::TensorInfo& t : gpt::ParamLayout::For(shape).Tensors()) {
    targets.push_back({"model." + t.name, ckpt::DType::kF32, 0,
                       std::as_writable_bytes(model->params().subspan(
                           static_cast<size_t>(t.offset), static_cast<size_t>(t.size())))});
  }
  ckpt::ReadCopy(*dir.tier, *step, targets);
  std::cerr << fmt::format("generate: {} ({} params) from {} of {}\n", shape.name,
                           model->params().size(), ckpt::StepDirName(*step), args.ckpt);

  std::vector<int32_t> context = tok.Encode(args.prompt);
  if (context.empty()) context.push_back(tok.Encode("\n").front());
  std::cout << args.prompt << std::flush;
  Rng rng(args.seed);
  const int64_t T = shape.seq_len;
  for (int64_t i = 0; i < args.tokens; ++i) {
    const auto n = std::min<int64_t>(T, std::ssize(context));
    const std::span<const int32_t> window(context.data() + context.size() - n, n);
    model->Forward(window, {}, 1, n);
    const int32_t next = Sample(model->Logits(0, n - 1), args.temperature, args.top_k, rng);
    context.push_back(next);
    std::cout << tok.Piece(next) << std::flush;
  }
  std::cout << "\n";
  return 0;
}

}  // namespace

Runner AddGenerateCommand(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "sample text from a trained model");
  cmd->add_option("--ckpt", args->ckpt,
                  "checkpoint: a run's ckpt/ directory (its newest step) or one step-N directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt", args->prompt, "text to continue");
  cmd->add_option("--tokens", args->tokens, "tokens to generate")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", args->top_k, "sample among the k likeliest tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer file (default: the training data's)");
  cmd->add_option("--threads", args->threads, "CPU threads (0 = all)")
      ->check(CLI::NonNegativeNumber);
  return [args] { return RunGenerate(*args); };
}

}  // namespace fmstack::cli
