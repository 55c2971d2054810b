//! A minimal HTTP/1.1 server for `/metrics`, on std's `TcpListener`.
//!
//! Hand-rolled rather than tiny_http or hyper: the exporter answers GET requests for two paths,
//! so a few dozen lines with read timeouts and a header size limit do it without an extra
//! dependency tree, and the cost of a scrape stays visible (encode + one write). Each connection
//! gets a short-lived thread; keep-alive is honoured so Prometheus reuses its connection.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Longest request head accepted (bytes).
const MAX_HEAD: usize = 16 * 1024;
/// An idle keep-alive connection is closed after this.
const IDLE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {addr}: {source}{hint}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
        hint: &'static str,
    },
}

/// A response: status, content type, body.
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

pub fn bind(addr: SocketAddr) -> Result<TcpListener, HttpError> {
    TcpListener::bind(addr).map_err(|source| {
        let hint = match source.kind() {
            std::io::ErrorKind::AddrInUse => {
                " (another exporter is using the port: choose another with --listen)"
            }
            std::io::ErrorKind::PermissionDenied => {
                " (ports below 1024 need privileges: choose another with --listen)"
            }
            std::io::ErrorKind::AddrNotAvailable => {
                " (this machine has no such address: use 127.0.0.1 or 0.0.0.0)"
            }
            _ => "",
        };
        HttpError::Bind { addr, source, hint }
    })
}

/// Serves forever: `handler(method, path)` answers each request.
pub fn serve<H>(listener: TcpListener, handler: H)
where
    H: Fn(&str, &str) -> Response + Send + Sync + Clone + 'static,
{
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let h = handler.clone();
        let _ = std::thread::Builder::new()
            .name("gpufeed-http".into())
            .spawn(move || {
                let _ = connection(stream, &h);
            });
    }
}

fn connection<H: Fn(&str, &str) -> Response>(
    stream: TcpStream,
    handler: &H,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IDLE))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let request = line.trim_end().to_string();
        let mut head = line.len();
        let mut keep_alive = request.ends_with("HTTP/1.1");
        loop {
            let mut h = String::new();
            let n = reader.read_line(&mut h)?;
            head += n;
            if n == 0 || head > MAX_HEAD {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("connection") {
                    let v = v.trim();
                    keep_alive = if v.eq_ignore_ascii_case("close") {
                        false
                    } else {
                        keep_alive || v.eq_ignore_ascii_case("keep-alive")
                    };
                }
            }
        }
        let mut parts = request.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        let resp = if method != "GET" && method != "HEAD" {
            Response {
                status: 405,
                content_type: "text/plain; charset=utf-8",
                body: b"only GET is supported\n".to_vec(),
            }
        } else {
            handler(method, path)
        };
        let reason = match resp.status {
            200 => "OK",
            404 => "Not Found",
            405 => "Method Not Allowed",
            _ => "Error",
        };
        let mut msg = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
            resp.status,
            resp.content_type,
            resp.body.len(),
            if keep_alive { "keep-alive" } else { "close" }
        )
        .into_bytes();
        if method != "HEAD" {
            msg.extend_from_slice(&resp.body);
        }
        out.write_all(&msg)?;
        out.flush()?;
        if !keep_alive {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn answers_get_keeps_alive_and_refuses_other_methods() {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            serve(l, |_, path| Response {
                status: if path == "/metrics" { 200 } else { 404 },
                content_type: "text/plain",
                body: format!("path {path}\n").into_bytes(),
            })
        });
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).unwrap();
        let r = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.ends_with("path /metrics\n"));
        s.write_all(b"POST /x HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut rest = String::new();
        s.read_to_string(&mut rest).unwrap();
        assert!(rest.starts_with("HTTP/1.1 405"), "{rest}");
    }

    #[test]
    fn a_port_in_use_is_one_clear_error() {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let e = bind(l.local_addr().unwrap()).unwrap_err().to_string();
        assert!(e.contains("another exporter is using the port"), "{e}");
    }
}
