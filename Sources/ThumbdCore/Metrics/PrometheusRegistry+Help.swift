import BlobStore
import Foundation
import HTTPServer
import Prometheus
import Support
import Synchronization
import Upstream

/// The registry's calls with a name and its help text (its descriptor form, without the
/// name split into namespace and unit).
extension PrometheusCollectorRegistry {
    private static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
    }

    func counter(_ name: String, labels: [(String, String)] = [], help: String) -> Prometheus.Counter {
        makeCounter(descriptor: Self.descriptor(name, help), labels: labels)
    }

    func gauge(_ name: String, labels: [(String, String)] = [], help: String) -> Prometheus.Gauge {
        makeGauge(descriptor: Self.descriptor(name, help), labels: labels)
    }

    func histogram(_ name: String, labels: [(String, String)] = [], buckets: [Duration], help: String) -> DurationHistogram {
        makeDurationHistogram(descriptor: Self.descriptor(name, help), labels: labels, buckets: buckets)
    }
}
