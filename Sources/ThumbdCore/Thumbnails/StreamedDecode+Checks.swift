import Support
import Thumbnailer

/// What a stream checks on an original's first bytes before it decodes any: the checks the
/// whole body gets in the processing stage, made early.
extension StreamedDecode {
    enum Verdict {
        case later, never
        case plan(ThumbnailPlan)
    }

    /// The checks the whole body will get, on its first bytes: a JPEG's signature, its
    /// header's structure, libvips's header read, the plan. `complete`: no more bytes will be
    /// looked at (the header did not fit in them).
    static func plan(head: Bytes, complete: Bool, thumbnailer: Thumbnailer,
                             planner: (ImageHeader) throws -> ThumbnailPlan) -> Verdict {
        guard head.count >= 64 else { return complete ? .never : .later }
        guard let (format, type) = ImageSniffer.sniff(head.prefix(64)), format == .jpeg else { return .never }
        guard head.withUnsafeBytes({ ImageHeaderCheck.dimensions(of: $0, contentType: type) }) != nil,
              let header = try? thumbnailer.header(of: head, format: format) else {
            return complete ? .never : .later
        }
        guard let plan = try? planner(header) else { return .never }
        return .plan(plan)
    }
}
