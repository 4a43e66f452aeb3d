#include "serve/loadgen.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "util/beast.h"
#include "util/error.h"
#include "util/random.h"

namespace fmstack::serve {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Timing {
  double ttft = -1, latency = 0;
  std::vector<double> itl;
  int64_t input = 0, output = 0;
  std::vector<int32_t> output_ids;
  bool ok = false;
  std::string error;
};

struct Job {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;
  int64_t conversation = -1;  // multiturn: which conversation, else -1
};

// One streamed completion over its own connection.
class Call : public std::enable_shared_from_this<Call> {
 public:
  Call(net::io_context& ioc, const LoadSpec& spec, Job job, std::function<void(Timing&&)> done)
      : stream_(ioc), spec_(spec), job_(std::move(job)), done_(std::move(done)) {}

  void Start(const tcp::endpoint& ep) {
    start_ = Clock::now();
    t_.input = std::ssize(job_.prompt);
    stream_.expires_after(std::chrono::seconds(static_cast<int64_t>(spec_.timeout)));
    stream_.async_connect(ep, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->Fail("connect: " + ec.message());
      self->Send();
    });
  }

 private:
  void Send() {
    json body = {{"model", spec_.model},
                 {"prompt", job_.prompt},
                 {"max_tokens", job_.max_tokens},
                 {"temperature", 0},
                 {"stream", true}};
    req_ = {http::verb::post, "/v1/completions", 11};
    req_.set(http::field::host, spec_.host);
    req_.set(http::field::content_type, "application/json");
    if (!spec_.api_key.empty()) req_.set(http::field::authorization, "Bearer " + spec_.api_key);
    req_.body() = body.dump();
    req_.prepare_payload();
    http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Fail("send: " + ec.message());
      self->parser_.body_limit(1ULL << 30);
      self->on_chunk_ = [s = self.get()](uint64_t, beast::string_view data, beast::error_code&) {
        s->Events(std::string_view(data.data(), data.size()));
        return data.size();
      };
      self->parser_.on_chunk_body(self->on_chunk_);
      self->Read();
    });
  }

  void Read() {
    http::async_read_some(
        stream_, buf_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
          if (ec) return self->Fail("read: " + ec.message());
          if (self->parser_.is_header_done() && self->parser_.get().result() != http::status::ok &&
              self->parser_.is_done())
            return self->Fail(fmt::format("HTTP {}: {}", self->parser_.get().result_int(),
                                          self->parser_.get().body()));
          if (!self->parser_.is_done()) return self->Read();
          self->Finish();
        });
  }

  // Server-sent events: "data: {...}\n\n", the last "data: [DONE]".
  void Events(std::string_view text) {
    pending_ += text;
    for (size_t end; (end = pending_.find("\n\n")) != std::string::npos;) {
      const std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const json j = json::parse(event.substr(6), nullptr, false);
      if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) continue;
      const json& ids = j["choices"][0]["token_ids"];
      if (ids.empty()) continue;
      const double now = Since(start_);
      if (t_.ttft < 0) {
        t_.ttft = now;
      } else {
        t_.itl.push_back(now - last_);
      }
      last_ = now;
      for (const json& id : ids) t_.output_ids.push_back(id.get<int32_t>());
    }
  }

  void Finish() {
    t_.latency = Since(start_);
    t_.output = std::ssize(t_.output_ids);
    t_.ok = t_.ttft >= 0;
    if (!t_.ok) t_.error = "no token arrived";
    Close();
  }

  void Fail(std::string why) {
    t_.error = std::move(why);
    t_.latency = Since(start_);
    Close();
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    if (done_) std::exchange(done_, nullptr)(std::move(t_));
  }

  beast::tcp_stream stream_;
  const LoadSpec& spec_;
  Job job_;
  std::function<void(Timing&&)> done_;
  http::request<http::string_body> req_;
  beast::flat_buffer buf_;
  http::response_parser<http::string_body> parser_;
  std::function<size_t(uint64_t, beast::string_view, beast::error_code&)> on_chunk_;
  std::string pending_;
  Clock::time_point start_;
  double last_ = 0;
  Timing t_;
};

std::vector<int32_t> Tokens(Rng& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(vocab)));
  return t;
}

int64_t Between(Rng& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(hi - lo + 1)));
}

void Check(const LoadSpec& s) {
  auto need = [](bool ok, std::string_view field, const std::string& what) {
    if (!ok) throw Error(fmt::format("bench serve: {} {}", field, what));
  };
  need(s.dataset == "random" || s.dataset == "prefix" || s.dataset == "multiturn", "--dataset",
       fmt::format("\"{}\" is not one of random, prefix, multiturn", s.dataset));
  need(s.requests >= 1, "--requests", "must be at least 1");
  need(s.vocab >= 2, "the vocabulary", "must hold at least 2 tokens");
  need(s.input_min >= 1 && s.input_min <= s.input_max, "--input-len",
       "must be a range lo:hi with 1 <= lo <= hi");
  need(s.output_min >= 1 && s.output_min <= s.output_max, "--output-len",
       "must be a range lo:hi with 1 <= lo <= hi");
  need(s.rate >= 0 && std::isfinite(s.rate), "--rate", "must be >= 0");
  need(s.concurrency >= 0, "--concurrency", "must be >= 0");
  need(s.prefixes >= 1 && s.prefix_len >= 0, "--prefixes",
       "and --prefix-len must be >= 1 and >= 0");
  need(s.turns >= 1, "--turns", "must be at least 1");
}

}  // namespace

Percentiles PercentilesOf(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {  // nearest rank
    const auto i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    return v[std::min(i, v.size() - 1)];
  };
  p.p50 = at(0.5), p.p90 = at(0.9), p.p99 = at(0.99);
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  return p;
}

LoadReport RunLoad(const LoadSpec& spec,
                   const std::function<void(int64_t, int64_t, double)>& progress) {
  Check(spec);
  net::io_context ioc{1};
  beast::error_code ec;
  const tcp::endpoint ep(net::ip::make_address(spec.host, ec), spec.port);
  if (ec) throw Error(fmt::format("bench serve: host \"{}\" is not an IP address", spec.host));
  Rng rng(spec.seed);
  const bool multi = spec.dataset == "multiturn";
  const int64_t conversations = multi ? std::max<int64_t>(1, spec.requests / spec.turns) : 0;
  const int64_t total = multi ? conversations * spec.turns : spec.requests;
  std::vector<std::vector<int32_t>> prefixes, history(static_cast<size_t>(conversations));
  std::vector<int64_t> turns_done(static_cast<size_t>(conversations), 0);
  for (int64_t i = 0; i < spec.prefixes && spec.dataset == "prefix"; ++i)
    prefixes.push_back(Tokens(rng, spec.prefix_len, spec.vocab));
  std::deque<Job> ready;
  for (int64_t i = 0; i < (multi ? conversations : total); ++i) {
    Job j;
    j.max_tokens = Between(rng, spec.output_min, spec.output_max);
    if (spec.dataset == "prefix") j.prompt = prefixes[static_cast<size_t>(i % spec.prefixes)];
    const auto tail = Tokens(rng, Between(rng, spec.input_min, spec.input_max), spec.vocab);
    j.prompt.insert(j.prompt.end(), tail.begin(), tail.end());
    if (multi) j.conversation = i, history[static_cast<size_t>(i)] = j.prompt;
    ready.push_back(std::move(j));
  }
  std::vector<Timing> results;
  std::vector<std::pair<int64_t, int64_t>> sent;
  int64_t in_flight = 0, launched = 0;
  const Clock::time_point start = Clock::now();
  Clock::time_point next_arrival = start;
  net::steady_timer timer(ioc), ticker(ioc);
  std::function<void()> pump;
  auto on_done = [&](Job job, Timing&& t) {
    --in_flight;
    if (job.conversation >= 0) {  // the next turn resends the whole history
      const auto c = static_cast<size_t>(job.conversation);
      if (++turns_done[c] < spec.turns && t.ok) {
        history[c].insert(history[c].end(), t.output_ids.begin(), t.output_ids.end());
        const auto more = Tokens(rng, Between(rng, spec.input_min, spec.input_max), spec.vocab);
        history[c].insert(history[c].end(), more.begin(), more.end());
        ready.push_front(
            {history[c], Between(rng, spec.output_min, spec.output_max), job.conversation});
      }
    }
    results.push_back(std::move(t));
    if (progress) progress(std::ssize(results), total, Since(start));
    pump();
  };
  pump = [&] {
    if (std::ssize(results) >= total) return ioc.stop();
    while (!ready.empty() && (spec.concurrency == 0 || in_flight < spec.concurrency)) {
      if (spec.rate > 0 && Clock::now() < next_arrival) {
        timer.expires_at(next_arrival);
        timer.async_wait([&](beast::error_code e) {
          if (!e) pump();
        });
        return;
      }
      Job job = std::move(ready.front());
      ready.pop_front();
      sent.emplace_back(std::ssize(job.prompt), job.max_tokens);
      ++in_flight, ++launched;
      if (spec.rate > 0)  // exponential gaps: a Poisson process
        next_arrival += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
            -std::log(1.0 - static_cast<double>(rng.Uniform())) / spec.rate));
      auto call = std::make_shared<Call>(
          ioc, spec, job, [&, job](Timing&& t) mutable { on_done(std::move(job), std::move(t)); });
      call->Start(ep);
    }
  };
  net::post(ioc, pump);
  ticker.expires_after(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.timeout)));
  ticker.async_wait([&](beast::error_code e) {
    if (!e) ioc.stop();
  });
  ioc.run();
  LoadReport r;
  r.seconds = Since(start);
  std::vector<double> ttft, tpot, itl, latency;
  int64_t good = 0;
  for (const Timing& t : results) {
    if (!t.ok) {
      ++r.failed;
      if (r.first_error.empty()) r.first_error = t.error;
      continue;
    }
    ++r.completed;
    r.input_tokens += t.input, r.output_tokens += t.output;
    ttft.push_back(t.ttft), latency.push_back(t.latency);
    const double per = t.output > 1 ? (t.latency - t.ttft) / static_cast<double>(t.output - 1) : 0;
    tpot.push_back(per);
    itl.insert(itl.end(), t.itl.begin(), t.itl.end());
    good += t.ttft <= spec.slo_ttft && per <= spec.slo_tpot;
  }
  r.failed += total - std::ssize(results);  // never finished within the timeout
  if (r.first_error.empty() && std::ssize(results) < total)
    r.first_error = fmt::format("{} requests did not finish within {} s",
                                total - std::ssize(results), spec.timeout);
  r.request_rate = static_cast<double>(r.completed) / r.seconds;
  r.output_rate = static_cast<double>(r.output_tokens) / r.seconds;
  r.total_token_rate = static_cast<double>(r.input_tokens + r.output_tokens) / r.seconds;
  r.ttft = PercentilesOf(ttft), r.tpot = PercentilesOf(tpot), r.itl = PercentilesOf(itl);
  r.latency = PercentilesOf(latency);
  r.goodput = static_cast<double>(good) / r.seconds;
  r.lengths = std::move(sent);
  return r;
}

}  // namespace fmstack::serve
