import Foundation

/// A real HTTP/2 origin: nginx (Debian's, built with http_v2) serving files over TLS with a
/// certificate signed by a certificate authority this helper makes with openssl for the
/// test, so that thumbd verifies it against `caFile`. nginx logs each request's connection
/// number and protocol, which is how a test sees multiplexing.
package final class TestTLSOrigin: @unchecked Sendable {  // set once in init
    package let port: UInt16
    package let directory: URL
    /// The test CA's certificate (PEM): what thumbd must trust.
    package var caFile: String { directory.appendingPathComponent("ca.pem").path }
    private let process: ChildProcess

    /// `files`: name → bytes, served at `/NAME` with `Cache-Control: max-age=60`.
    package init(files: [String: [UInt8]]) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("thumbd-tls-\(UUID().uuidString)")
        let www = directory.appendingPathComponent("www")
        try FileManager.default.createDirectory(at: www, withIntermediateDirectories: true)
        // nginx's workers may run as another user (when the tests run as root).
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        for (name, bytes) in files {
            let path = www.appendingPathComponent(name).path
            _ = FileManager.default.createFile(atPath: path, contents: Data(bytes), attributes: [.posixPermissions: 0o644])
        }
        let dir = directory.path
        try Self.run("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                                 "-keyout", "\(dir)/ca.key", "-out", "\(dir)/ca.pem", "-days", "2", "-subj", "/CN=thumbd test CA"])
        try Self.run("openssl", ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                                 "-keyout", "\(dir)/server.key", "-out", "\(dir)/server.csr", "-subj", "/CN=127.0.0.1"])
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\n".write(toFile: "\(dir)/san.ext", atomically: true, encoding: .utf8)
        try Self.run("openssl", ["x509", "-req", "-in", "\(dir)/server.csr", "-CA", "\(dir)/ca.pem", "-CAkey", "\(dir)/ca.key",
                                 "-CAcreateserial", "-out", "\(dir)/server.pem", "-days", "2", "-extfile", "\(dir)/san.ext"])
        port = try Self.freePort()
        let configuration = """
            worker_processes 1;
            pid \(dir)/nginx.pid;
            error_log \(dir)/error.log warn;
            events { worker_connections 256; }
            http {
                log_format h2 '$connection $server_protocol $uri';
                access_log \(dir)/access.log h2;
                client_body_temp_path \(dir)/body;
                proxy_temp_path \(dir)/proxy;
                fastcgi_temp_path \(dir)/fastcgi;
                uwsgi_temp_path \(dir)/uwsgi;
                scgi_temp_path \(dir)/scgi;
                server {
                    listen 127.0.0.1:\(port) ssl http2;
                    ssl_certificate \(dir)/server.pem;
                    ssl_certificate_key \(dir)/server.key;
                    root \(www.path);
                    add_header Cache-Control "max-age=60";
                }
            }
            """
        try configuration.write(toFile: "\(dir)/nginx.conf", atomically: true, encoding: .utf8)
        let nginx = FileManager.default.fileExists(atPath: "/usr/sbin/nginx") ? "/usr/sbin/nginx" : "/usr/bin/nginx"
        // Neither of the test run's pipes: an nginx outliving a crashed test process would
        // keep them open, and `swift test` would wait for it forever.
        process = try ChildProcess(nginx, ["-p", dir, "-c", "\(dir)/nginx.conf", "-g", "daemon off;"], stderr: .null)
        // Up to 10 s for the port to answer.
        for _ in 0..<1000 {
            if Self.accepts(port) { return }
            guard process.isRunning else { break }
            usleep(10_000)
        }
        let log = (try? String(contentsOfFile: "\(dir)/error.log", encoding: .utf8)) ?? ""
        stop()
        throw HTTPTestError(description: "nginx did not start on \(port): \(log)")
    }

    deinit { stop() }

    package func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
    }

    package func url(_ name: String) -> String { "https://127.0.0.1:\(port)/\(name)" }

    /// The requests nginx has logged: its connection number, the protocol, the path.
    package func requests() -> [(connection: String, protocol: String, path: String)] {
        let text = (try? String(contentsOfFile: directory.appendingPathComponent("access.log").path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            return fields.count == 3 ? (String(fields[0]), String(fields[1]), String(fields[2])) : nil
        }
    }

    private static func run(_ tool: String, _ arguments: [String]) throws {
        let process = try ChildProcess("/usr/bin/env", [tool] + arguments, stderr: .null)
        guard process.waitForExit() else {
            process.stop()
            throw HTTPTestError(description: "\(tool) \(arguments.first ?? "") did not finish in 30 s")
        }
        guard process.terminationStatus == 0 else {
            throw HTTPTestError(description: "\(tool) \(arguments.first ?? "") failed (\(process.terminationStatus))")
        }
    }

    /// A port the kernel just handed out (bound, then closed for nginx to take).
    private static func freePort() throws -> UInt16 { try ClosedPort().port }

    private static func accepts(_ port: UInt16) -> Bool {
        guard let connection = try? RawConnection(port: port) else { return false }
        connection.close()
        return true
    }
}
