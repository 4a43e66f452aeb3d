// `fmstack bench serve`: the load generator (serve/loadgen.h) against a
// running server (--url), or against an engine started here on a model
// preset with random weights (--model), whose figures are then set beside
// the machine's limits measured in the same run: memory bandwidth for a
// decode at batch 1, sgemm on the model's shapes for saturated throughput.
#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "gpt/decoder.h"
#include "gpt/model.h"
#include "gpt/sgemm_peak.h"
#include "serve/engine.h"
#include "serve/limits.h"
#include "serve/loadgen.h"
#include "serve/server.h"
#include "util/error.h"
#include "workload/presets.h"

namespace fmstack::cli {
namespace {

struct BenchServeArgs {
  serve::LoadSpec load;
  std::string url, model = "gpt2-124m", input = "128", output = "128";
  double kv_cache_gb = 2;
  int64_t max_batch_tokens = 2048, max_seqs = 64;
  bool no_prefix_caching = false, json = false, limits = true;
  std::string weights_out;  // the random weights, raw float32, and the shape beside them
  int threads = 0;
};

std::pair<int64_t, int64_t> Range(const std::string& text, const std::string& option) {
  try {
    const size_t colon = text.find(':');
    const int64_t lo = std::stoll(text.substr(0, colon));
    const int64_t hi = colon == std::string::npos ? lo : std::stoll(text.substr(colon + 1));
    return {lo, hi};
  } catch (const std::exception&) {
    throw Error(fmt::format("{} \"{}\": expected N or LO:HI (token counts)", option, text));
  }
}

std::string Ms(const serve::Percentiles& p) {
  return fmt::format("{:>9.1f} {:>9.1f} {:>9.1f}", p.p50 * 1e3, p.p90 * 1e3, p.p99 * 1e3);
}

void Print(const serve::LoadSpec& s, const serve::LoadReport& r) {
  std::cout << fmt::format(
      "dataset {} | {} requests ({} failed) in {:.2f} s | {}\n", s.dataset, r.completed, r.failed,
      r.seconds,
      s.rate > 0 ? fmt::format("Poisson {:.2f} req/s", s.rate)
                 : fmt::format("concurrency {}",
                               s.concurrency > 0 ? std::to_string(s.concurrency) : "unlimited"));
  std::cout << fmt::format(
      "throughput: {:.2f} req/s, {:.1f} output tok/s, {:.1f} total tok/s ({} in, {} out)\n",
      r.request_rate, r.output_rate, r.total_token_rate, r.input_tokens, r.output_tokens);
  std::cout << fmt::format("| ms   | {:>9} {:>9} {:>9} |\n", "p50", "p90", "p99");
  std::cout << fmt::format("| TTFT | {} |\n| TPOT | {} |\n| ITL  | {} |\n| E2E  | {} |\n",
                           Ms(r.ttft), Ms(r.tpot), Ms(r.itl), Ms(r.latency));
  std::cout << fmt::format("goodput: {:.2f} req/s within TTFT <= {} ms and TPOT <= {} ms\n",
                           r.goodput, s.slo_ttft * 1e3, s.slo_tpot * 1e3);
  if (!r.first_error.empty()) std::cout << "first error: " << r.first_error << "\n";
}

nlohmann::json Json(const serve::LoadReport& r) {
  auto p = [](const serve::Percentiles& x) {
    return nlohmann::json{{"p50", x.p50}, {"p90", x.p90}, {"p99", x.p99}, {"mean", x.mean}};
  };
  return {{"seconds", r.seconds},
          {"completed", r.completed},
          {"failed", r.failed},
          {"input_tokens", r.input_tokens},
          {"output_tokens", r.output_tokens},
          {"request_rate", r.request_rate},
          {"output_rate", r.output_rate},
          {"total_token_rate", r.total_token_rate},
          {"ttft", p(r.ttft)},
          {"tpot", p(r.tpot)},
          {"itl", p(r.itl)},
          {"latency", p(r.latency)},
          {"goodput", r.goodput},
          {"first_error", r.first_error},
          {"lengths", r.lengths}};
}

int RunBenchServe(BenchServeArgs a) {
  gpt::SetCpuThreads(a.threads);
  std::tie(a.load.input_min, a.load.input_max) = Range(a.input, "--input-len");
  std::tie(a.load.output_min, a.load.output_max) = Range(a.output, "--output-len");
  const bool tty = isatty(2) != 0;
  double last = -1;
  auto progress = [&](int64_t done, int64_t total, double s) {
    if (!tty && s - last < 5 && done < total) return;  // a line every 5 s into a log
    last = s;
    const double rate = static_cast<double>(done) / std::max(s, 1e-9);
    std::cerr << fmt::format("{}bench serve: {}/{} requests, {:.2f} req/s, ETA {:.0f} s{}",
                             tty ? "\r" : "", done, total, rate,
                             static_cast<double>(total - done) / std::max(rate, 1e-9),
                             tty && done < total ? "" : "\n");
  };
  nlohmann::json out;
  if (!a.url.empty()) {  // a running server
    const std::string rest =
        a.url.substr(a.url.find("//") == std::string::npos ? 0 : a.url.find("//") + 2);
    const size_t colon = rest.find(':');
    if (colon == std::string::npos)
      throw Error(fmt::format("--url {}: expected http://HOST:PORT", a.url));
    a.load.host = rest.substr(0, colon);
    a.load.port = static_cast<uint16_t>(std::stoi(rest.substr(colon + 1)));
    if (a.load.vocab == 0) a.load.vocab = 256;
    const serve::LoadReport r = serve::RunLoad(a.load, progress);
    if (a.json)
      std::cout << Json(r).dump(2) << "\n";
    else
      Print(a.load, r);
    return r.failed == 0 ? 0 : 1;
  }
  const std::optional<workload::TransformerShape> shape = workload::FindPreset(a.model);
  if (!shape) {
    const auto names = workload::PresetNames();
    throw Error(fmt::format("--model \"{}\" is not a preset {}", a.model,
                            DidYouMeanOrList(a.model, names, "presets")));
  }
  const gpt::ParamLayout layout = gpt::ParamLayout::For(*shape);
  std::vector<float> params(static_cast<size_t>(layout.total));
  gpt::InitParams(layout, params, a.load.seed);
  if (!a.weights_out.empty()) {  // for a peer (bench/serve_torch_peer.py) to load the same weights
    std::ofstream w(a.weights_out, std::ios::binary);
    w.write(reinterpret_cast<const char*>(params.data()),
            static_cast<std::streamsize>(params.size() * sizeof(float)));
    std::ofstream j(a.weights_out + ".json");
    j << nlohmann::json{{"layers", shape->layers}, {"hidden", shape->hidden},
                        {"heads", shape->heads},   {"ffn_hidden", shape->ffn_hidden},
                        {"vocab", shape->vocab},   {"seq_len", shape->seq_len}}
             .dump();
    if (!w || !j) throw Error(fmt::format("--weights-out {}: cannot write it", a.weights_out));
  }
  auto decoder = gpt::CreateDecoder(*shape, params,
                                    {.max_tokens = a.max_batch_tokens, .max_logits = a.max_seqs});
  params = {};
  const int64_t weight_bytes = decoder->weight_bytes();
  const int64_t block_bytes = decoder->kv_geometry().block_floats() * 4;
  serve::EngineOptions eo;
  eo.kv_blocks = std::max<int64_t>(1, static_cast<int64_t>(a.kv_cache_gb * 1e9) / block_bytes);
  eo.scheduler = {.max_batch_tokens = a.max_batch_tokens, .max_seqs = a.max_seqs};
  eo.prefix_caching = !a.no_prefix_caching;
  eo.max_waiting = 1 << 20;
  const std::string hardware = decoder->Hardware();
  serve::Engine engine(std::move(decoder), std::move(eo));
  serve::ServerOptions so;
  so.port = 0, so.model_name = a.model, so.max_connections = 1 << 16;
  serve::Server server(
      engine,
      [](std::string_view) -> std::vector<int32_t> {
        throw serve::InvalidRequest("prompt", "this bench server has no tokenizer: send token ids");
      },
      [](int32_t) { return std::string(); }, so);
  engine.Start();
  std::thread loop([&] { server.Run(false); });
  a.load.port = server.port();
  a.load.model = a.model;
  a.load.vocab = shape->vocab;
  std::cerr << fmt::format("bench serve: {} with random weights ({:.0f} MB), {}, KV {} blocks\n",
                           a.model, static_cast<double>(weight_bytes) / 1e6, hardware,
                           engine.stats().kv_blocks_free);
  serve::LoadReport r;
  try {
    r = serve::RunLoad(a.load, progress);
  } catch (...) {
    server.Shutdown(), loop.join(), engine.Stop();
    throw;
  }
  server.Shutdown();
  loop.join();
  engine.Stop();
  out = Json(r);
  if (a.limits) {
    // Limits measured now, on the same threads: reading the weights once per
    // decoded token, and 2 FLOP per weight per token on sgemm of these shapes.
    const double bw = serve::MeasureReadBandwidth(std::min<int64_t>(weight_bytes, 1LL << 30));
    const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(a.max_batch_tokens, 512));
    const double gflops = gpt::MeasureSgemmGflops({{rows, 3 * shape->hidden, shape->hidden},
                                                   {rows, shape->hidden, shape->hidden},
                                                   {rows, shape->ffn_hidden, shape->hidden},
                                                   {rows, shape->hidden, shape->ffn_hidden}});
    const double decode_bound = bw * 1e9 / static_cast<double>(weight_bytes);
    const double compute_bound = gflops * 1e9 / (2.0 * static_cast<double>(weight_bytes) / 4);
    const double decode_rate = r.tpot.p50 > 0 ? 1 / r.tpot.p50 : 0;
    out["limits"] = {{"read_gbps", bw},
                     {"sgemm_gflops", gflops},
                     {"weight_bytes", weight_bytes},
                     {"decode_bound_tps", decode_bound},
                     {"compute_bound_tps", compute_bound},
                     {"decode_tps", decode_rate},
                     {"decode_of_bound", decode_rate / decode_bound},
                     {"total_of_compute_bound", r.total_token_rate / compute_bound}};
    if (!a.json) {
      Print(a.load, r);
      std::cout << fmt::format(
          "limits (measured now, {} threads): read {:.1f} GB/s -> decode bound {:.1f} tok/s per "
          "sequence; sgemm {:.1f} GFLOP/s -> compute bound {:.1f} tok/s\n"
          "decode 1/TPOT p50 {:.1f} tok/s = {:.2f} of the bandwidth bound; total {:.1f} tok/s = "
          "{:.2f} of the compute bound\n",
          gpt::CpuThreads(), bw, decode_bound, gflops, compute_bound, decode_rate,
          decode_rate / decode_bound, r.total_token_rate, r.total_token_rate / compute_bound);
    }
  } else if (!a.json) {
    Print(a.load, r);
  }
  if (a.json) std::cout << out.dump(2) << "\n";
  return r.failed == 0 ? 0 : 1;
}

}  // namespace

Runner AddBenchServeCommand(CLI::App& bench) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* cmd =
      bench.add_subcommand("serve", "load generator for the serving API (vllm bench serve style)");
  cmd->add_option("--url", a->url, "a running server, http://HOST:PORT (default: start one here)");
  cmd->add_option("--api-key", a->load.api_key, "bearer token for --url");
  cmd->add_option("--model", a->model, "preset served here with random weights")
      ->capture_default_str();
  cmd->add_option("--dataset", a->load.dataset, "random | prefix | multiturn")
      ->capture_default_str();
  cmd->add_option("--requests", a->load.requests, "requests (multiturn: conversations x turns)")
      ->capture_default_str();
  cmd->add_option("--rate", a->load.rate, "Poisson arrivals per second (0 = all at once)");
  cmd->add_option("--concurrency", a->load.concurrency,
                  "requests in flight at most (0 = no limit)");
  cmd->add_option("--input-len", a->input, "prompt tokens, N or LO:HI")->capture_default_str();
  cmd->add_option("--output-len", a->output, "max_tokens, N or LO:HI")->capture_default_str();
  cmd->add_option("--prefix-len", a->load.prefix_len, "prefix: shared tokens")
      ->capture_default_str();
  cmd->add_option("--prefixes", a->load.prefixes, "prefix: distinct shared prefixes")
      ->capture_default_str();
  cmd->add_option("--turns", a->load.turns, "multiturn: turns per conversation")
      ->capture_default_str();
  cmd->add_option("--vocab", a->load.vocab, "--url: draw token ids below this (default 256)");
  cmd->add_option("--seed", a->load.seed, "dataset and weights seed");
  cmd->add_option("--slo-ttft", a->load.slo_ttft, "goodput SLO on TTFT, seconds")
      ->capture_default_str();
  cmd->add_option("--slo-tpot", a->load.slo_tpot, "goodput SLO on TPOT, seconds")
      ->capture_default_str();
  cmd->add_option("--timeout", a->load.timeout, "seconds for the whole run")->capture_default_str();
  cmd->add_option("--kv-cache-gb", a->kv_cache_gb, "here: KV pool, GB")->capture_default_str();
  cmd->add_option("--max-batch-tokens", a->max_batch_tokens, "here: tokens per step")
      ->capture_default_str();
  cmd->add_option("--max-seqs", a->max_seqs, "here: sequences per step")->capture_default_str();
  cmd->add_flag("--no-prefix-caching", a->no_prefix_caching, "here: prefix caching off");
  cmd->add_flag("!--no-limits", a->limits, "here: skip measuring memory bandwidth and sgemm");
  cmd->add_option("--threads", a->threads, "CPU threads (0 = all)");
  cmd->add_flag("--json", a->json, "one JSON object on stdout");
  cmd->add_option("--weights-out", a->weights_out,
                  "here: also write the random weights (raw float32) and FILE.json (the shape)");
  return [a] { return RunBenchServe(*a); };
}

}  // namespace fmstack::cli
