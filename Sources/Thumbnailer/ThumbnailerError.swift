/// Why a thumbnail was not made, by the step that failed — never by searching libvips's
/// error text, which in 8.14 is one buffer for the whole process. The text, read and
/// cleared right after the failing call, is carried for the log only.
public enum ThumbnailerError: Error, Sendable, Equatable {
    /// The bytes are not an image of a format thumbd decodes (sniffed before any loader).
    case unsupportedFormat
    /// The chosen loader refused the header, or the pixels did not decode (truncated, corrupt).
    case notAnImage(String)
    /// More source pixels than allowed (judged from the header, before any decode).
    case tooManyPixels(width: Int, height: Int, limit: Int)
    /// The output would be larger than allowed.
    case outputTooLarge(width: Int, height: Int, limit: Int)
    /// The asked crop lies wholly outside the (upright) source.
    case cropOutside(Region, width: Int, height: Int)
    /// The work would cost more than allowed (an intermediate image, memory, an AVIF encode),
    /// judged from the header before any decode.
    case tooCostly(String)
    /// libvips refused to resize a valid image with these parameters.
    case resizeRefused(String)
    /// The resize ran past its time limit and was stopped.
    case timedOut(Duration)
    /// Stopped because nobody waits for it any more.
    case cancelled
    /// The encoder failed.
    case failed(String)
}
