internal import CVips

/// The libvips this process runs (`thumbd --version`, the build-info metric); readable
/// before `vips_init`.
public enum LibVips {
    public static var version: String { String(cString: vips_version_string()) }
}
