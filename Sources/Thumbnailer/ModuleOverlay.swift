internal import CVips
import Foundation

/// The libvips modules thumbd loads: HEIF (AVIF) alone. libvips 8.14 loads every module in
/// `<VIPSHOME>/<its libdir's name>/vips-modules-X.Y` at `vips_init`, and Debian's
/// ImageMagick, JPEG XL, poppler and OpenSlide modules would map their libraries into the
/// process then. So before `vips_init`, a private directory is laid out with a link to the
/// HEIF module only, VIPSHOME points at it for that call, and it is removed once the module
/// is loaded. Without a libvips on the map, or a HEIF module, there is no overlay: nothing
/// is loaded but libvips itself then (no module directory exists under an empty home).
struct ModuleOverlay {
    let home: URL

    /// Lays out the overlay; nil when there is nothing to point at (libvips keeps its own
    /// directory then, which is not expected on Debian).
    static func make() -> ModuleOverlay? {
        guard let library = libvipsPath() else { return nil }
        let libdir = URL(fileURLWithPath: library).deletingLastPathComponent().resolvingSymlinksInPath()
        let modules = "vips-modules-\(vips_version(0)).\(vips_version(1))"
        let heif = libdir.appendingPathComponent(modules).appendingPathComponent("vips-heif.so")
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-vips-\(UUID().uuidString)")
        let directory = home.appendingPathComponent(libdir.lastPathComponent).appendingPathComponent(modules)
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
            if FileManager.default.fileExists(atPath: heif.path) {
                try FileManager.default.createSymbolicLink(at: directory.appendingPathComponent("vips-heif.so"),
                                                           withDestinationURL: heif)
            }
        } catch {
            try? FileManager.default.removeItem(at: home)
            return nil
        }
        return ModuleOverlay(home: home)
    }

    func remove() { try? FileManager.default.removeItem(at: home) }

    /// The file libvips was loaded from, as the process's own map says.
    private static func libvipsPath() -> String? {
        // Read to the end: /proc files say they are empty, and a read by size stops at a page.
        guard let data = try? FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/maps")).readToEnd() else { return nil }
        let maps = String(decoding: data, as: UTF8.self)
        for line in maps.split(separator: "\n") {
            guard let path = line.split(separator: " ", omittingEmptySubsequences: true).last, path.hasPrefix("/") else { continue }
            if URL(fileURLWithPath: String(path)).lastPathComponent.hasPrefix("libvips.so") { return String(path) }
        }
        return nil
    }
}
