// `fmstack generate --ckpt runs/JOB/ckpt --prompt "..."`: sample from a trained model.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <numeric>

#include "cli/commands.h"
#include "cli/options.h"
#include "gpt/layout.h"
#include "gpt/model.h"
#include "gpt/sgemm_peak.h"
#include "train/tokenizer.h"
#include "train/trained_model.h"
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
  const train::TrainedModel m = train::LoadTrainedModel(args.ckpt, args.tokenizer);
  const workload::TransformerShape& shape = m.shape;
  const train::BpeTokenizer& tok = m.tokenizer;
  auto model = gpt::CreateModel(shape, {.max_batch = 1});
  std::copy(m.params.begin(), m.params.end(), model->params().begin());
  std::cerr << fmt::format("generate: {} ({} params) from {}\n", shape.name, model->params().size(),
                           m.source);

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
      ->check(ExistingDirectory());
  cmd->add_option("--prompt", args->prompt, "text to continue");
  cmd->add_option("--tokens", args->tokens, "tokens to generate")->check(Positive());
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->check(NonNegative());
  cmd->add_option("--top-k", args->top_k, "sample among the k likeliest tokens")->check(Positive());
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer file (default: the training data's)");
  cmd->add_option("--threads", args->threads, "CPU threads (0 = all)")->check(NonNegative());
  return [args] { return RunGenerate(*args); };
}

}  // namespace fmstack::cli
