// `fmstack serve JOB.toml --ckpt RUN_DIR/ckpt`: the inference engine behind
// the OpenAI-compatible HTTP API and the WebSocket stream (docs/serve.md).
#include <fmt/format.h>
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/options.h"
#include "gpt/decoder.h"
#include "gpt/sgemm_peak.h"
#include "serve/engine.h"
#include "serve/grpc_server.h"
#include "serve/server.h"
#include "train/trained_model.h"
#include "util/error.h"

namespace fmstack::cli {
namespace {

struct ServeArgs {
  std::string job, ckpt, tokenizer, catalog, host;
  int port = -1;
  int grpc_port = -2;
  int threads = -1;
};

// The bearer token from a file only its owner can read.
std::string ReadApiKey(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("serve.api_key_file {}: {}", path, std::strerror(errno)));
  if ((st.st_mode & 077) != 0)
    throw Error(fmt::format("serve.api_key_file {} is readable by others (mode {:o}): chmod 600 it",
                            path, st.st_mode & 0777));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string key = ss.str();
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' '))
    key.pop_back();
  if (key.size() < 16)
    throw Error(fmt::format("serve.api_key_file {} holds {} bytes: a key needs at least 16", path,
                            key.size()));
  return key;
}

int64_t AvailableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb = 0;
  std::string unit;
  while (in >> name >> kb >> unit)
    if (name == "MemAvailable:") return kb * 1024;
  throw Error("/proc/meminfo has no MemAvailable: write serve.kv_cache as a size");
}

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

int RunServe(const ServeArgs& args) {
  const spec::JobSpec job = LoadJob(args.job, "", LoadCatalog(args.catalog));
  const spec::ServeSpec& s = job.serve;
  gpt::SetCpuThreads(static_cast<int>(args.threads >= 0 ? args.threads : s.threads));
  train::TrainedModel m = train::LoadTrainedModel(args.ckpt, args.tokenizer);
  auto decoder = gpt::CreateDecoder(
      m.shape, m.params,
      {.max_tokens = s.max_batch_tokens, .max_logits = s.max_seqs, .block_size = s.block_size});
  m.params = {};  // the decoder holds its own packed copy
  const int64_t block_bytes = decoder->kv_geometry().block_floats() * 4;
  const double kv_bytes = s.kv_cache_bytes > 0
                              ? s.kv_cache_bytes
                              : s.kv_cache_share * static_cast<double>(AvailableMemory());
  const auto blocks = static_cast<int64_t>(kv_bytes / static_cast<double>(block_bytes));
  if (blocks < 1)
    throw Error(
        fmt::format("serve.kv_cache ({:.0f} bytes) holds no KV block of {} bytes "
                    "({} tokens)",
                    kv_bytes, block_bytes, s.block_size));
  const train::BpeTokenizer& tok = m.tokenizer;
  const serve::Encoder encode = [&tok](std::string_view text) { return tok.Encode(text); };
  auto piece = [&tok](int32_t t) -> std::string {
    return t >= 0 && t < tok.vocab_size() ? tok.Piece(t) : std::string();
  };
  serve::EngineOptions eo;
  eo.kv_blocks = blocks;
  eo.scheduler = {.max_batch_tokens = s.max_batch_tokens, .max_seqs = s.max_seqs};
  eo.prefix_caching = s.prefix_caching;
  eo.model_id = m.id;
  eo.max_waiting = s.max_waiting;
  eo.piece = piece;
  const std::string weights =
      fmt::format("{:.0f} MB of weights", static_cast<double>(decoder->weight_bytes()) / 1e6);
  const std::string hardware = decoder->Hardware();
  serve::Engine engine(std::move(decoder), std::move(eo));
  serve::ServerOptions so;
  so.host = args.host.empty() ? s.host : args.host;
  so.port = static_cast<uint16_t>(args.port >= 0 ? args.port : s.port);
  if (!s.api_key_file.empty()) so.api_key = ReadApiKey(s.api_key_file);
  so.model_name = s.model_name.empty() ? job.name : s.model_name;
  so.max_body_bytes = static_cast<int64_t>(s.max_body_bytes);
  so.request_timeout = Ms(s.request_timeout), so.idle_timeout = Ms(s.idle_timeout);
  so.ping_interval = Ms(s.ping_interval), so.drain_timeout = Ms(s.drain_timeout);
  so.max_connections = s.max_connections;
  serve::Server server(engine, encode, piece, so);
  std::cerr << fmt::format(
      "serve: {} ({}) from {}\nserve: {}; KV pool {} blocks of {} tokens ({:.1f} MB), batch "
      "{} tokens / {} sequences, prefix caching {}\nserve: model \"{}\" on http://{}:{} "
      "(/v1/completions, /v1/models, /v1/stream, /health, /metrics){}\n",
      m.shape.name, weights, m.source, hardware, blocks, s.block_size,
      static_cast<double>(blocks * block_bytes) / 1e6, s.max_batch_tokens, s.max_seqs,
      s.prefix_caching ? "on" : "off", so.model_name, so.host, server.port(),
      so.api_key.empty() ? "" : ", API key required");
  std::unique_ptr<serve::GrpcServer> grpc;
  const int64_t grpc_port = args.grpc_port >= -1 ? args.grpc_port : s.grpc_port;
  if (grpc_port >= 0) {
    grpc = std::make_unique<serve::GrpcServer>(
        engine, encode, piece,
        serve::GrpcOptions{.host = so.host,
                           .port = static_cast<int>(grpc_port),
                           .api_key = so.api_key,
                           .ping_interval = so.ping_interval,
                           .max_message_bytes = so.max_body_bytes});
    std::cerr << fmt::format("serve: gRPC stream fmstack.serve.v1.Generation/Stream on {}:{}\n",
                             so.host, grpc->port());
  }
  engine.Start();
  server.Run(true);
  if (grpc) grpc->Shutdown(std::chrono::seconds(1));
  engine.Stop();
  const serve::EngineStats st = engine.stats();
  std::cerr << fmt::format("serve: stopped after {} requests ({} tokens generated)\n", st.finished,
                           st.generated_tokens);
  return 0;
}

}  // namespace

Runner AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd =
      app.add_subcommand("serve", "serve a trained model over an OpenAI-compatible API");
  cmd->add_option("job", args->job, "job file (its [serve] section)")
      ->required()
      ->check(ExistingFile());
  cmd->add_option("--ckpt", args->ckpt,
                  "checkpoint: a run directory, its ckpt/ directory (the newest step) or a step "
                  "directory")
      ->required()
      ->check(ExistingDirectory());
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer file (default: the training data's)");
  cmd->add_option("--host", args->host, "address to listen on (default serve.host)");
  cmd->add_option("--port", args->port, "port (default serve.port; 0 = any free)")
      ->check(Between(0, 65535));
  cmd->add_option("--grpc-port", args->grpc_port,
                  "gRPC stream port (default serve.grpc_port; 0 = any free, -1 = off)")
      ->check(Between(-1, 65535));
  cmd->add_option("--threads", args->threads, "CPU threads (default serve.threads; 0 = all)")
      ->check(NonNegative());
  cmd->add_option("--catalog", args->catalog, "hardware catalog directory");
  return [args] { return RunServe(*args); };
}

}  // namespace fmstack::cli
