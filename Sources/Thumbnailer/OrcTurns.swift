internal import CVips
import Glibc
import Synchronization

/// liborc's compiled code, made and freed one at a time.
///
/// libvips compiles liborc programs (SIMD code) when it builds a reduce or a convolution, and
/// frees them when the operation goes: in any thread, at any time. Debian 12's liborc (0.4.33)
/// allocates code under its own lock but frees it under none (`orc_code_chunk_free`), so a
/// free beside a compile or another free corrupts its list of code chunks: the daemon crashed
/// there (SIGSEGV in liborc, in a resize thread), and a C loop of 8 threads resizing crashed
/// in 2 runs of 3.
///
/// No lock of libvips or liborc can be held around thumbd's own calls: an image's release
/// takes them inside (a deadlock, tried), and many compiles and frees happen inside libvips
/// where thumbd never sees them (an encode's, an animation's frames'). So thumbd puts the lock
/// where the two calls cross from libvips into liborc: it defines `orc_program_compile` and
/// `orc_program_free` itself. The executable's definitions come first in the dynamic lookup,
/// so libvips's calls land here; each takes `turn` and calls liborc's own, found once with
/// `dlsym(RTLD_NEXT)`. Nothing else runs under the lock, and liborc takes no lock of thumbd's
/// or libvips's inside it, so it cannot deadlock; a compile or a free holds it for
/// microseconds, once per operation built, never per pixel.
///
/// The lock is not re-entered: liborc calls these two functions inside itself directly, not
/// through its PLT (0.4.33, disassembled), so its own calls never land here while a thread
/// holds `turn`. Those inner calls (`orc_memcpy`, `orc_memset` compiling their programs on
/// first use) are not among what libvips calls, so nothing libvips does compiles or frees
/// outside the lock.
package enum OrcTurns {
    /// How many compiles and frees came through `turn`: the tests' proof that libvips's
    /// calls reach these definitions (a build that lost them would run unguarded).
    package static var calls: Int { turn.withLock { $0 } }

    /// Whether libvips runs liborc code at all (`VIPS_NOVECTOR` or a build without liborc:
    /// no compile, no free, nothing to guard).
    package static var libvipsCompiles: Bool { vips_vector_isenabled() != 0 }

    fileprivate static let turn = Mutex(0)

    fileprivate typealias Compile = @convention(c) (OpaquePointer?) -> Int32
    fileprivate typealias Free = @convention(c) (OpaquePointer?) -> Void

    fileprivate static let compile: Compile = liborc("orc_program_compile")
    fileprivate static let free: Free = liborc("orc_program_free")

    /// liborc's own definition of `name`: the next one after this executable's.
    private static func liborc<F>(_ name: String) -> F {
        // RTLD_NEXT is ((void *) -1) in <dlfcn.h>, a macro Swift does not import.
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: -1), name) else {
            fatalError("libvips called \(name), and liborc does not define it")
        }
        return unsafeBitCast(symbol, to: F.self)
    }
}

/// liborc's `orc_program_compile`, under `OrcTurns.turn`. Returns liborc's OrcCompileResult.
@_cdecl("orc_program_compile")
public func thumbdOrcProgramCompile(_ program: OpaquePointer?) -> Int32 {
    let compile = OrcTurns.compile
    return OrcTurns.turn.withLock { calls in
        calls += 1
        return compile(program)
    }
}

/// liborc's `orc_program_free`, under `OrcTurns.turn`.
@_cdecl("orc_program_free")
public func thumbdOrcProgramFree(_ program: OpaquePointer?) {
    let free = OrcTurns.free
    OrcTurns.turn.withLock { calls in
        calls += 1
        free(program)
    }
}
