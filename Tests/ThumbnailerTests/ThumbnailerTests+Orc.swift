import Testing
@testable import Thumbnailer

/// liborc's compiled code is made and freed under thumbd's lock (`OrcTurns`): Debian 12's
/// liborc frees it under none, and a free beside a compile in another thread crashed the
/// daemon. The lock is reached only if libvips's calls land on thumbd's definitions of
/// `orc_program_compile` and `orc_program_free`, which a link that stopped exporting them
/// would lose without a sign: this is the sign.
extension ThumbnailerTests {
    @Test("a resize's liborc programs are compiled and freed through thumbd's lock",
          .enabled("libvips runs no liborc code here (VIPS_NOVECTOR)") {
              _ = ThumbnailerTests.thumbnailer  // libvips reads VIPS_NOVECTOR when it starts
              return OrcTurns.libvipsCompiles
          })
    func orcCompilesAndFreesTakeTheLock() throws {
        let before = OrcTurns.calls
        let source = try Self.photo(1200, 800)
        let thumbnail = try Self.thumbnailer.thumbnail(of: source, ThumbnailSpec(width: 256, height: 256, format: .jpeg, quality: 80))
        #expect(thumbnail.width == 256)
        // A reduce compiles its programs at build and frees them once its image goes, which
        // is before `thumbnail` returns: at least one compile and one free.
        #expect(OrcTurns.calls >= before + 2, "liborc calls through the lock: \(OrcTurns.calls - before)")
    }
}
