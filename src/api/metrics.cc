#include "api/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "telemetry/series.h"

namespace tessera::api {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  telemetry::AppendEscaped(out, v);
  return out;
}

std::string_view MethodLabel(std::string_view method) {
  for (std::string_view known : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    if (method == known) return known;
  }
  return "other";
}

void Metrics::CountRequest(const std::string& method, const std::string& route, int status) {
  // Every label is from a fixed set, whatever a client sends: a method Tessera knows or "other",
  // a route's pattern (or "unmatched"), an HTTP status.
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{std::string(MethodLabel(method)), route, std::clamp(status, 100, 599)}];
}

void Metrics::CountUnrecordedAudit() {
  std::lock_guard<std::mutex> lock(mu_);
  ++unrecorded_audit_;
}

void Metrics::CountRefusal(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++refusals_[reason];
}

namespace {

void Gauge(std::string& out, std::string_view name, std::string_view type, std::string_view help,
           int64_t value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

void Histogram(std::string& out, std::string_view name, std::string_view help,
               const core::LatencyHistogram& h) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    out += fmt::format("{}_bucket{{le=\"{:g}\"}} {}\n", name, h.bounds[i], h.buckets[i]);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {:g}\n{}_count {}\n", name, h.count, name,
                     h.sum, name, h.count);
}

void HttpSection(std::string& out, const HttpStats& h) {
  Gauge(out, "tessera_http_connections", "gauge", "Open HTTP connections.", h.connections_open);
  Gauge(out, "tessera_http_connections_accepted_total", "counter", "HTTP connections accepted.",
        h.connections_accepted);
  Gauge(out, "tessera_http_requests_in_flight", "gauge",
        "Requests read and not yet answered (long polls included).", h.in_flight);
  Gauge(out, "tessera_http_request_body_bytes_in_flight", "gauge",
        "Bytes of request bodies announced or read and not yet answered (docs/http.md).",
        h.body_bytes_in_flight);
  out +=
      "# HELP tessera_http_refused_total Connections and requests the HTTP layer refused, by "
      "reason.\n# TYPE tessera_http_refused_total counter\n";
  for (const auto& [reason, n] : {std::pair{"connection_limit", h.refused_total_limit},
                                  {"address_connection_limit", h.refused_address_limit},
                                  {"overloaded", h.refused_overloaded},
                                  {"caller_share", h.refused_share},
                                  {"timeout", h.timeouts},
                                  {"too_large", h.too_large},
                                  {"malformed", h.malformed}}) {
    out += fmt::format("tessera_http_refused_total{{reason=\"{}\"}} {}\n", reason, n);
  }
  Gauge(out, "tessera_http_handler_exceptions_total", "counter",
        "Exceptions caught at the request barrier (each answered 500 and logged).",
        h.handler_exceptions);
}

}  // namespace

std::string Metrics::Render(const core::State& state, const HttpStats& http) const {
  std::string out;
  // Instances by state, billing and tenant.
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> instances;
  state.instances().table().ForEach([&](const core::Instance& inst) {
    ++instances[{std::string(core::StateName(inst.state)),
                 std::string(core::BillingName(inst.billing)), inst.tenant.str()}];
  });
  out += "# HELP tessera_instances Instances by state, billing mode and tenant.\n";
  out += "# TYPE tessera_instances gauge\n";
  for (const auto& [k, n] : instances) {
    out += fmt::format("tessera_instances{{state=\"{}\",billing=\"{}\",tenant=\"{}\"}} {}\n",
                       std::get<0>(k), std::get<1>(k), EscapeLabel(std::get<2>(k)), n);
  }
  // GPUs allocated and free by model and sharing mode, in GPUs (shares as fractions). MIG slices
  // are summed per model in compute slices and rounded down once, as quotas count them.
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> gpus;
  std::map<std::string, std::pair<int64_t, int64_t>> mig;  // Model -> (GPUs, slices used).
  const fleet::Fleet& fleet = state.fleet();
  for (const fleet::Node& n : fleet.nodes()) {
    if (!n.model.valid() || n.removed) continue;
    const std::string model = fleet.catalog().gpu(n.model).id;
    for (const fleet::Gpu& g : n.gpus) {
      if (g.mode == catalog::SharingMode::kMig) {
        ++mig[model].first;
        mig[model].second += fleet::UsedComputeSlices(g);
        continue;
      }
      auto& [used, free] = gpus[{model, std::string(catalog::SharingModeName(g.mode))}];
      used += fleet::kMilliPerGpu - g.free_milli;
      free += g.free_milli;
    }
  }
  for (const auto& [model, counts] : mig) {
    const int total = fleet.catalog().FindGpu(model)->mig->compute_slices;
    const int64_t used = core::MigSliceMilli(counts.second, total);
    gpus[{model, "mig"}] = {used, counts.first * fleet::kMilliPerGpu - used};
  }
  out += "# HELP tessera_gpus GPUs allocated and free, by model and sharing mode.\n";
  out += "# TYPE tessera_gpus gauge\n";
  for (const auto& [k, v] : gpus) {
    for (const auto& [status, milli] : {std::pair{"allocated", v.first}, {"free", v.second}}) {
      out += fmt::format("tessera_gpus{{model=\"{}\",mode=\"{}\",status=\"{}\"}} {:g}\n", k.first,
                         k.second, status, static_cast<double>(milli) / fleet::kMilliPerGpu);
    }
  }
  Gauge(out, "tessera_queue_pending", "gauge", "Instances waiting in the queue.",
        static_cast<int64_t>(state.instances().queue().size()));
  Gauge(out, "tessera_queue_groups", "gauge",
        "Groups of identical queued requests (one placement attempt each per pass).",
        static_cast<int64_t>(state.instances().queue().groups()));
  Gauge(out, "tessera_preemption_searches_total", "counter", "Searches for spot victims run.",
        state.counters().preemption_searches);
  Gauge(out, "tessera_instances_evicted_total", "counter",
        "Ended instances that left memory after the retention period (the store keeps them).",
        state.counters().evicted);
  {
    // Groups' services (docs/volumes.md): what each served through its one endpoint.
    const auto services = state.service_stats().Snapshot();
    out +=
        "# HELP tessera_group_service_requests_total Requests to a group's service, those not "
        "served included.\n# TYPE tessera_group_service_requests_total counter\n";
    for (const auto& [group, s] : services) {
      out += fmt::format("tessera_group_service_requests_total{{group=\"{}\"}} {}\n", group,
                         s.requests);
    }
    out +=
        "# HELP tessera_group_service_failed_total Requests to a group's service not served (no "
        "healthy member, or its endpoint unreachable).\n# TYPE "
        "tessera_group_service_failed_total counter\n";
    for (const auto& [group, s] : services) {
      out +=
          fmt::format("tessera_group_service_failed_total{{group=\"{}\"}} {}\n", group, s.failed);
    }
    out +=
        "# HELP tessera_group_service_requests_per_second Requests a second to a group's "
        "service over the last 30 s (what autoscale's rps divides by its members).\n# TYPE "
        "tessera_group_service_requests_per_second gauge\n";
    for (const auto& [group, s] : services) {
      out += fmt::format("tessera_group_service_requests_per_second{{group=\"{}\"}} {:g}\n", group,
                         s.rate);
    }
    out +=
        "# HELP tessera_group_service_request_duration_seconds From a request's arrival to the "
        "end of its member's answer.\n# TYPE tessera_group_service_request_duration_seconds "
        "histogram\n";
    for (const auto& [group, s] : services) {
      for (size_t i = 0; i < core::ServiceStats::kBounds.size(); ++i) {
        out += fmt::format(
            "tessera_group_service_request_duration_seconds_bucket{{group=\"{}\",le=\"{:g}\"}} "
            "{}\n",
            group, core::ServiceStats::kBounds[i], s.buckets[i]);
      }
      out += fmt::format(
          "tessera_group_service_request_duration_seconds_bucket{{group=\"{}\",le=\"+Inf\"}} "
          "{}\ntessera_group_service_request_duration_seconds_sum{{group=\"{}\"}} "
          "{:g}\ntessera_group_service_request_duration_seconds_count{{group=\"{}\"}} {}\n",
          group, s.requests - s.failed, group, s.seconds, group, s.requests - s.failed);
    }
  }
  out += "# HELP tessera_repack_moves_total Migratable instances moved to make room.\n";
  out += "# TYPE tessera_repack_moves_total counter\n";
  out += fmt::format("tessera_repack_moves_total {}\n", state.counters().repack_moves);
  out += "# HELP tessera_preemptions_total Spot instances preempted.\n";
  out += "# TYPE tessera_preemptions_total counter\n";
  out += fmt::format("tessera_preemptions_total {}\n", state.counters().preemptions);
  Gauge(out, "tessera_nodes_lost_total", "counter",
        "Joined nodes that went silent for the node timeout (not_ready; their work moves once "
        "their lease runs out).",
        state.counters().nodes_lost);
  Gauge(out, "tessera_gpus_unhealthy_total", "counter",
        "GPUs taken out of service since start (a fatal XID, lost, double-bit ECC, an operator).",
        state.counters().gpus_unhealthy);
  {
    // Per node, as its agent run counts them (a restarted agent counts from 0 again).
    out +=
        "# HELP tessera_mig_repartitions_total MIG layout changes an agent made to host a "
        "granted slice (idle devices destroyed to make it).\n";
    out += "# TYPE tessera_mig_repartitions_total counter\n";
    for (const auto& [name, node] : state.agents().nodes()) {
      if (node.mig_repartitions > 0 || !node.mig.empty()) {
        out += fmt::format("tessera_mig_repartitions_total{{node=\"{}\"}} {}\n", name,
                           node.mig_repartitions);
      }
    }
  }
  Gauge(out, "tessera_agent_reports_total", "counter", "Agent reports applied.",
        state.counters().agent_reports);
  Gauge(out, "tessera_agent_reports_refused_total", "counter",
        "Agent reports refused (replayed, superseded or malformed).",
        state.counters().agent_reports_refused);
  Gauge(out, "tessera_agent_times_clamped_total", "counter",
        "Workload start times agents reported before the instance was scheduled or in the "
        "future, taken as the nearest time that can be.",
        state.counters().agent_times_clamped);

  // Groups, and what autoscaled ones follow: one family at a time, as the format requires.
  struct Family {
    const char* name;
    const char* type;
    const char* help;
    std::string lines{};
  };
  Family size{"tessera_group_size", "gauge", "Members a group has."};
  Family desired{"tessera_group_autoscale_desired", "gauge",
                 "The size the group's autoscaler last decided."};
  Family floor{"tessera_group_autoscale_floor", "gauge",
               "The autoscaler's floor: its min, or the schedule's when higher."};
  Family target{"tessera_group_autoscale_target", "gauge", "The autoscaler's target."};
  Family value{"tessera_group_autoscale_value", "gauge",
               "The autoscaler's last reading of its metric."};
  Family decisions{"tessera_group_autoscale_decisions_total", "counter",
                   "Sizes the autoscaler changed, by direction."};
  for (const auto& [id, g] : state.groups().all()) {
    if (g.state != core::GroupState::kWaiting && g.state != core::GroupState::kRunning) continue;
    const std::string labels = fmt::format("group=\"{}\",tenant=\"{}\"", id, g.tenant.str());
    size.lines += fmt::format("{}{{{}}} {}\n", size.name, labels, g.spec.size);
    if (!g.spec.autoscale) continue;
    const core::Autoscale& a = *g.spec.autoscale;
    const std::string metric =
        fmt::format("{},metric=\"{}\"", labels, core::AutoscaleMetricName(a.metric));
    desired.lines +=
        fmt::format("{}{{{}}} {}\n", desired.name, labels, g.desired > 0 ? g.desired : g.spec.size);
    floor.lines += fmt::format("{}{{{}}} {}\n", floor.name, labels, g.floor > 0 ? g.floor : a.min);
    target.lines += fmt::format("{}{{{}}} {:g}\n", target.name, metric, a.target);
    if (g.metric_value) {
      value.lines += fmt::format("{}{{{}}} {:g}\n", value.name, metric, *g.metric_value);
    }
    decisions.lines +=
        fmt::format("{0}{{{1},direction=\"up\"}} {2}\n{0}{{{1},direction=\"down\"}} {3}\n",
                    decisions.name, labels, g.scale_ups, g.scale_downs);
  }
  for (const Family* f : {&size, &desired, &floor, &target, &value, &decisions}) {
    out +=
        fmt::format("# HELP {} {}\n# TYPE {} {}\n{}", f->name, f->help, f->name, f->type, f->lines);
  }
  Histogram(out, "tessera_scheduling_latency_seconds", "Time to place one request.",
            state.counters().scheduling_latency);
  Histogram(out, "tessera_instance_start_latency_seconds",
            "Created (or re-queued) to running, as the node's agent reported it.",
            state.counters().start_latency);
  HttpSection(out, http);
  std::lock_guard<std::mutex> lock(mu_);
  Gauge(out, "tessera_audit_refusals_unrecorded_total", "counter",
        "Refused requests the audit log did not record: their caller was over its rate.",
        unrecorded_audit_);
  out += "# HELP tessera_api_refused_total Requests refused before their route ran, by reason.\n";
  out += "# TYPE tessera_api_refused_total counter\n";
  for (const auto& [reason, n] : refusals_) {
    out += fmt::format("tessera_api_refused_total{{reason=\"{}\"}} {}\n", reason, n);
  }
  out += "# HELP tessera_api_requests_total API requests by method, route and status code.\n";
  out += "# TYPE tessera_api_requests_total counter\n";
  for (const auto& [k, n] : requests_) {
    out += fmt::format("tessera_api_requests_total{{method=\"{}\",route=\"{}\",code=\"{}\"}} {}\n",
                       std::get<0>(k), EscapeLabel(std::get<1>(k)), std::get<2>(k), n);
  }
  return out;
}

}  // namespace tessera::api
