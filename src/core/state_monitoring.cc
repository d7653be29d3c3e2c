// State's telemetry: the series of the nodes agents serve (readings.h), of faults' interruptions
// and of budgets, which /metrics shows and Monitoring evaluates.
#include "core/state.h"

namespace tessera::core {

std::vector<telemetry::Target> State::Targets() const {
  std::vector<telemetry::Target> out;
  readings_.NodeTargets(out);
  // One series per instance a fault moved lately: its owner's to see and alert on.
  monitoring_.InterruptionTargets(out);
  accounts_.BudgetTargets(out);
  return out;
}

void State::EvaluateAlerts(store::Batch& batch) {
  if (monitoring_.Due()) monitoring_.Evaluate(Targets(), batch);
}

}  // namespace tessera::core
