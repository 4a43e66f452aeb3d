// plan: rendering a Plan as a terminal table, Markdown, or JSON. The JSON
// schema is documented in docs/plan-schema.json (schema_version below).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.h"

namespace fmstack::plan {

inline constexpr int kPlanSchemaVersion = 2;

std::string RenderText(const Plan& plan);
std::string RenderMarkdown(const Plan& plan);
nlohmann::json ToJson(const Plan& plan);

}  // namespace fmstack::plan
