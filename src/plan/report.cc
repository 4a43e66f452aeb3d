// Text and Markdown share one layout: sections of (item, value, detail) rows.
#include "plan/report.h"

#include <fmt/format.h>

#include "util/text_table.h"
#include "util/units.h"

namespace fmstack::plan {
namespace {

using units::FormatBytes;
using units::FormatSeconds;

struct Section {
  std::string title;
  TextTable table;
};

Section NewSection(std::string title) {
  return {std::move(title),
          TextTable({"item", "value", "detail"},
                    {TextTable::Align::kLeft, TextTable::Align::kRight, TextTable::Align::kLeft})};
}

std::string Pct(double share) {
  return fmt::format("{:.2f}%", 100 * share);
}

Section ModelSection(const Plan& p) {
  Section s = NewSection("Model");
  const auto& sh = p.shape;
  s.table.AddRow(
      {"shape", p.model,
       fmt::format(
           "{} layers, hidden {}, {} heads ({} kv), ffn {}, vocab {}, seq {}{}", sh.layers,
           sh.hidden, sh.heads, sh.kv_heads, sh.ffn_hidden, sh.vocab, sh.seq_len,
           sh.is_moe() ? fmt::format(", {} experts top-{}", sh.experts, sh.active_experts) : "")});
  s.table.AddRow({"parameters", units::FormatCount(static_cast<double>(p.params.total)),
                  fmt::format("{} exactly", p.params.total)});
  if (p.shape.is_moe()) {
    s.table.AddRow({"active parameters", units::FormatCount(static_cast<double>(p.params.active)),
                    "per token (top-k experts)"});
  }
  s.table.AddRow({"FLOPs per token (6N)", units::FormatFlop(p.flops_per_token.six_n),
                  "training, 6 x active params"});
  s.table.AddRow({"FLOPs per token (detailed)", units::FormatFlop(p.flops_per_token.detailed),
                  fmt::format("matmuls + attention ({} of it)",
                              units::FormatFlop(p.flops_per_token.attention))});
  return s;
}

Section MemorySection(const Plan& p) {
  Section s = NewSection("Memory");
  const MemoryPlan& m = p.memory;
  s.table.AddRow({"convention", fmt::format("{:g} B/param", m.bytes.per_param()), m.bytes.name});
  s.table.AddRow({"parameters", FormatBytes(m.whole.params), "whole model"});
  s.table.AddRow({"gradients", FormatBytes(m.whole.grads), "whole model"});
  s.table.AddRow({"optimizer state", FormatBytes(m.whole.optimizer),
                  m.bytes.master > 0 ? "AdamW moments + fp32 master weights" : "AdamW moments"});
  s.table.AddRow({"training state", FormatBytes(m.whole.state()), "unsharded, before activations"});
  if (m.per_accelerator) {
    const auto& a = *m.per_accelerator;
    const auto& l = p.layout;
    s.table.AddRow(
        {"per accelerator", FormatBytes(a.total()),
         fmt::format("dp {} tp {} pp {} ep {} cp {}, ZeRO-{}: params {}, grads {}, optimizer {}, "
                     "activations {}",
                     l.dp, l.tp, l.pp, l.ep, l.cp, l.zero_stage, FormatBytes(a.params),
                     FormatBytes(a.grads), FormatBytes(a.optimizer), FormatBytes(a.activations))});
    s.table.AddRow({"HBM available", FormatBytes(m.hbm_bytes),
                    fmt::format("{:.0f}% used", 100 * a.total() / m.hbm_bytes)});
    if (p.fits) {
      s.table.AddRow({"layout fits", *p.fits ? "yes" : "NO", p.fit_reason});
    }
  }
  return s;
}

Section FitSection(const Plan& p) {
  Section s{"Fewest accelerators that hold the training state",
            TextTable({"accelerator", "HBM", "min count", "peak", "accel-hours @ MFU"})};
  for (const FitRow& r : p.memory.fits) {
    s.table.AddRow({r.accelerator, FormatBytes(r.hbm_bytes), std::to_string(r.min_for_state),
                    r.peak_flops > 0 ? units::FormatFlopRate(r.peak_flops) : "n/a",
                    r.hours > 0 ? units::FormatCount(r.hours) : "-"});
  }
  return s;
}

Section ComputeSection(const Plan& p) {
  Section s = NewSection("Compute");
  const ComputePlan& c = p.compute;
  s.table.AddRow({"tokens", units::FormatCount(c.tokens),
                  c.tokens_from_steps ? "train.steps x global_batch x seq_len" : ""});
  s.table.AddRow({"training FLOPs (6N)", units::FormatFlop(c.flops_6n), "used for hours and MFU"});
  s.table.AddRow({"training FLOPs (detailed)", units::FormatFlop(c.flops_detailed),
                  "with the attention term"});
  if (c.peak_flops > 0 && c.tokens > 0) {
    s.table.AddRow(
        {"peak per accelerator", units::FormatFlopRate(c.peak_flops), p.cluster->accelerator.name});
    s.table.AddRow({"target MFU", Pct(c.target_mfu),
                    "train.target_mfu, an input; `fmstack sim` computes MFU from its step model"});
    s.table.AddRow({"accelerator-hours", units::FormatCount(c.accelerator_hours), ""});
    s.table.AddRow({"wall time", FormatSeconds(c.wall_seconds),
                    fmt::format("on {} accelerators", p.cluster->accelerators())});
    s.table.AddRow({fmt::format("to finish in {:g} days", c.deadline_days),
                    fmt::format("{} accelerators", c.accelerators_for_deadline), ""});
  }
  if (c.observed_hours > 0) {
    s.table.AddRow({"observed accelerator-hours", units::FormatCount(c.observed_hours), ""});
    s.table.AddRow({"implied MFU (6N)", Pct(c.implied_mfu_6n),
                    fmt::format("6N FLOPs / (peak x observed hours); hours above use target MFU {}",
                                Pct(c.target_mfu))});
    s.table.AddRow(
        {"implied MFU (detailed)", Pct(c.implied_mfu_detailed), "attention FLOPs included"});
  }
  return s;
}

Section CostSection(const Plan& p) {
  Section s = NewSection("Cost");
  const CostPlan& c = p.cost;
  s.table.AddRow({"price per instance-hour",
                  c.price_per_hour > 0 ? fmt::format("${:.2f}", c.price_per_hour) : "unknown",
                  p.cluster->instance.price_as_of.empty()
                      ? ""
                      : "list price as of " + p.cluster->instance.price_as_of});
  if (c.price_per_hour > 0) {
    s.table.AddRow({"per month, on-demand", units::FormatUsd(c.per_month_on_demand),
                    fmt::format("{} nodes incl. {} spares x 730 h",
                                p.cluster->nodes + p.cluster->spares, p.cluster->spares)});
    if (c.instance_hours > 0) {
      s.table.AddRow({"training run, on-demand", units::FormatUsd(c.on_demand),
                      fmt::format("{} instance-hours", units::FormatCount(c.instance_hours))});
      if (p.cluster->spot_fraction > 0) {
        s.table.AddRow(
            {"training run, with Spot", units::FormatUsd(c.blended),
             fmt::format("{:.0f}% on Spot at {:.0f}% off", 100 * p.cluster->spot_fraction,
                         100 * p.cluster->spot_discount)});
      }
    }
  }
  return s;
}

// "fault set llama3-405b: The Llama 3 Herd ..." -> "fault set llama3-405b".
std::string ShortSource(const std::string& source) {
  return source.substr(0, std::min(source.find(':'), source.find(" (")));
}

Section CheckpointSection(const Plan& p) {
  Section s = NewSection("Checkpoints");
  const CheckpointPlan& c = p.checkpoint;
  s.table.AddRow({"size", FormatBytes(c.bytes),
                  p.memory.bytes.master > 0 ? "weights + fp32 master + optimizer state"
                                            : "weights + optimizer state"});
  if (p.cluster) {
    s.table.AddRow({"blocking save", FormatSeconds(c.save_seconds),
                    "each accelerator's share into host memory (resilience.snapshot_bandwidth)"});
    for (const resilience::TierCost& t : c.tiers) {
      s.table.AddRow(
          {t.name + " tier write", FormatSeconds(t.write_seconds),
           fmt::format("in the background; read back in {}", FormatSeconds(t.read_seconds))});
    }
  }
  if (c.mtti > 0) {
    s.table.AddRow({"job MTTI", FormatSeconds(c.mtti), ShortSource(c.mtti_source)});
    s.table.AddRow({"nodes away at once", fmt::format("{:.1f}", c.nodes_away.mean),
                    fmt::format("in repair or maintenance; {} spares cover 99% of the time",
                                c.nodes_away.spares_99)});
    s.table.AddRow({"interval, MTTI/10", FormatSeconds(c.interval_tenth_mtti), "seeds' rule"});
    if (c.interval_young_daly > 0) {
      s.table.AddRow({"interval, Young/Daly", FormatSeconds(c.interval_young_daly),
                      "sqrt(2 x blocking x MTTI)"});
    }
  }
  if (c.interval > 0) {
    s.table.AddRow({"interval used", FormatSeconds(c.interval), c.interval_rule});
    if (c.overhead > 0)
      s.table.AddRow({"expected overhead", Pct(c.overhead), "saving + lost work"});
    s.table.AddRow({"bandwidth, blocking save", units::FormatBandwidth(c.bandwidth_blocking),
                    "save within the overhead budget"});
    s.table.AddRow({"bandwidth, async save", units::FormatBandwidth(c.bandwidth_async),
                    "drain before the next save"});
  }
  return s;
}

Section StorageSection(const Plan& p) {
  Section s = NewSection("Storage and quota");
  const StoragePlan& st = p.storage;
  s.table.AddRow({"data", FormatBytes(st.data_bytes), ""});
  s.table.AddRow(
      {"capacity", FormatBytes(st.total_bytes),
       fmt::format("data + {} x {} checkpoints", st.generations, FormatBytes(p.checkpoint.bytes))});
  if (p.cluster) {
    if (st.monthly_cost > 0) {
      s.table.AddRow(
          {"shared tier per month", units::FormatUsd(st.monthly_cost), p.cluster->shared.tier});
    }
    s.table.AddRow({"vCPU quota", units::FormatCount(static_cast<double>(p.vcpus)),
                    fmt::format("{} x {} vCPUs", p.cluster->nodes + p.cluster->spares,
                                p.cluster->instance.vcpus)});
  }
  return s;
}

std::vector<Section> Sections(const Plan& p) {
  std::vector<Section> out;
  out.push_back(ModelSection(p));
  out.push_back(MemorySection(p));
  out.push_back(FitSection(p));
  out.push_back(ComputeSection(p));
  if (p.cluster) out.push_back(CostSection(p));
  out.push_back(CheckpointSection(p));
  out.push_back(StorageSection(p));
  return out;
}

std::string Header(const Plan& p) {
  std::string cluster = "no cluster given (--cluster FILE)";
  if (p.cluster) {
    cluster =
        fmt::format("{} x {} ({} x {} = {} accelerators, +{} spares)", p.cluster->nodes,
                    p.cluster->instance.name, p.cluster->nodes, p.cluster->instance.accelerators,
                    p.cluster->accelerators(), p.cluster->spares);
  }
  return fmt::format("fmstack plan: {} on {}", p.job, cluster);
}

}  // namespace

std::string RenderText(const Plan& plan) {
  std::string out = Header(plan) + "\n";
  for (const Section& s : Sections(plan)) out += "\n" + s.title + "\n" + s.table.RenderText();
  for (const std::string& w : plan.warnings) out += "\nwarning: " + w;
  if (!plan.warnings.empty()) out += "\n";
  return out;
}

std::string RenderMarkdown(const Plan& plan) {
  std::string out = "# " + Header(plan) + "\n";
  for (const Section& s : Sections(plan))
    out += "\n## " + s.title + "\n\n" + s.table.RenderMarkdown();
  for (const std::string& w : plan.warnings) out += "\n> warning: " + w + "\n";
  return out;
}

}  // namespace fmstack::plan
