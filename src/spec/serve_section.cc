// The [serve] section: the engine's KV pool and batching caps, and the API
// server's address, authentication and limits.
#include <fmt/format.h>

#include <filesystem>

#include "spec/job_spec.h"

namespace fmstack::spec {

ServeSpec ReadServe(StrictTable& root, const std::string& job_dir) {
  ServeSpec s;
  std::optional<StrictTable> t = root.Table("serve");
  if (!t) return s;
  if (const toml::node* kv = t->Peek("kv_cache"); kv != nullptr) {
    const std::optional<std::string> text = kv->value<std::string>();
    if (text && !text->empty() && text->back() == '%') {
      double pct = 0;
      try {
        size_t used = 0;
        pct = std::stod(text->substr(0, text->size() - 1), &used);
        if (used != text->size() - 1) pct = -1;
      } catch (const std::exception&) {
        pct = -1;
      }
      if (!(pct > 0 && pct <= 90))
        t->Fail("kv_cache", fmt::format("\"{}\" is not a share between 0% and 90%", *text),
                "write a size (\"4GiB\") or a share of available memory (\"30%\")");
      s.kv_cache_share = pct / 100;
      (void)t->String("kv_cache");  // marks the key as read
    } else {
      s.kv_cache_bytes = t->Bytes("kv_cache").value_or(0);
      if (!(s.kv_cache_bytes >= 1 << 20))
        t->Fail("kv_cache", "expected at least 1 MiB (\"4GiB\") or a share (\"30%\")");
    }
  }
  s.block_size = t->Int("block_size", 1, 256).value_or(s.block_size);
  s.max_batch_tokens = t->Int("max_batch_tokens", 1, 1 << 20).value_or(s.max_batch_tokens);
  s.max_seqs = t->Int("max_seqs", 1, 4096).value_or(s.max_seqs);
  s.prefix_caching = t->Bool("prefix_caching").value_or(s.prefix_caching);
  s.max_waiting = t->Int("max_waiting", 1, 1 << 20).value_or(s.max_waiting);
  s.host = t->String("host").value_or(s.host);
  s.port = t->Int("port", 0, 65535).value_or(s.port);
  s.grpc_port = t->Int("grpc_port", -1, 65535).value_or(s.grpc_port);
  if (std::optional<std::string> key = t->String("api_key_file")) {
    std::filesystem::path p(*key);
    if (p.is_relative() && !job_dir.empty()) p = std::filesystem::path(job_dir) / p;
    s.api_key_file = p.lexically_normal().string();
  }
  s.model_name = t->String("model_name").value_or("");
  s.ping_interval = t->Seconds("ping_interval").value_or(s.ping_interval);
  s.max_body_bytes = t->Bytes("max_body").value_or(s.max_body_bytes);
  s.request_timeout = t->Seconds("request_timeout").value_or(s.request_timeout);
  s.idle_timeout = t->Seconds("idle_timeout").value_or(s.idle_timeout);
  s.drain_timeout = t->Seconds("drain_timeout").value_or(s.drain_timeout);
  for (auto [key, v] : {std::pair{"ping_interval", s.ping_interval},
                        {"request_timeout", s.request_timeout},
                        {"idle_timeout", s.idle_timeout},
                        {"drain_timeout", s.drain_timeout}}) {
    if (!(v >= 0.05 && v <= 86400)) t->Fail(key, "expected a duration from 50 ms to 1 day");
  }
  if (!(s.max_body_bytes >= 1024 && s.max_body_bytes <= (1 << 30)))
    t->Fail("max_body", "expected a size from 1 KiB to 1 GiB");
  s.max_connections = t->Int("max_connections", 1, 1 << 20).value_or(s.max_connections);
  s.threads = t->Int("threads", 0, 4096).value_or(s.threads);
  t->Finish();
  return s;
}

}  // namespace fmstack::spec
