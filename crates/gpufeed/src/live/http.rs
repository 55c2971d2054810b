//! The `/metrics` HTTP/1.1 server: hyper 1.x on a one-thread tokio runtime.
//!
//! Why hyper: it is the HTTP implementation most of the Rust ecosystem runs on (axum, reqwest,
//! tonic), and its HTTP/1 server has every limit `serve` needs built in: a bound on the request
//! head (answered with 431), a deadline for reading the head (which also closes idle keep-alive
//! connections), 400 for malformed requests, request bodies drained or the connection closed,
//! `Connection: close` and HEAD handled. tiny_http has none of these limits and spawns a thread
//! per connection; axum would only add a router and tower layers on top of hyper for two paths.
//! A one-thread runtime keeps `serve` at one extra OS thread however many clients connect.
//!
//! Limits ([`Limits::default`]): request line plus headers at most 16 KiB, the whole head within
//! 10 s of the connection going idle (a slow or idle client is closed then), at most 256 open
//! connections. When a connection arrives at the cap, the open connection that has waited
//! longest for a request head is closed to make room, one that never completed a request first
//! (300 slowloris connections sending a header byte a second had locked scrapes out until the
//! 10 s timeout), but never one just opened (under 100 ms, its head on its way) while another can
//! go: a loris that has one request answered and then idles would otherwise outrank a scraper's
//! new connection. A real scraper's head arrives within milliseconds of its connection,
//! so it is never the one that waited longest; the slow clients take turns being closed.
//! Descriptors stay bounded: the cap, plus at most [`EVICT_SLACK`] closing at any moment (one
//! more is then accepted and closed at once).

use crate::exit::{Exit, Failure};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A connection opened less than this long ago that has not sent its first head yet is closed to
/// make room only when every open one is such. A loris that has one `GET` answered and then
/// idles counts as a served client; without this a scraper's brand-new connection, whose head
/// was still on its way, was the one "never served" and closed first (12-43% of scrapes failed
/// under 300 such connections). A real client sends its head within milliseconds.
const YOUNG_MS: u64 = 100;

/// Connections over the cap that may still be closing (evicted, not yet dropped by the runtime)
/// before new ones are refused instead.
pub(crate) const EVICT_SLACK: usize = 16;

type Body = http_body_util::Full<Bytes>;

#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpError {
    #[error("cannot listen on {addr}: {source}{hint}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("cannot start the HTTP server: {0}")]
    Start(std::io::Error),
}

/// What one connection may cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Longest request line plus headers, in bytes (at least 8192: hyper's smallest buffer).
    pub max_head_bytes: usize,
    /// Time to receive a whole request head, counted from the moment the connection is idle
    /// (opened, or its last response written): also the keep-alive idle timeout.
    pub head_timeout: Duration,
    /// Connections served at once; more are accepted and closed at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 16 * 1024,
            head_timeout: Duration::from_secs(10),
            max_connections: 256,
        }
    }
}

/// A response: status, content type, body.
pub(crate) struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
}

pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, HttpError> {
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

/// Serves until the process ends: `handler(path)` answers each GET or HEAD request (hyper leaves
/// out the body of a HEAD answer); other methods get 405 with `Allow: GET, HEAD`. Blocks the
/// calling thread, which becomes the runtime's only thread.
pub(crate) fn serve<H>(listener: TcpListener, limits: Limits, handler: H) -> Result<(), HttpError>
where
    H: Fn(&str) -> Response + Send + Sync + 'static,
{
    listener.set_nonblocking(true).map_err(HttpError::Start)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(HttpError::Start)?;
    let handler = Arc::new(handler);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).map_err(HttpError::Start)?;
        let open = Arc::new(AtomicUsize::new(0));
        let conns = Arc::new(Conns::new());
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.head_timeout)
            .max_buf_size(limits.max_head_bytes.max(8192))
            .max_header_size(limits.max_head_bytes)
            .keep_alive(true);
        let builder = Arc::new(builder);
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(_) => {
                    // Out of descriptors or a connection reset before accept: wait a little
                    // rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if conns.len() >= limits.max_connections && conns.evict_one() {
                // Let the runtime drop the evicted connection's task (and close its socket).
                tokio::task::yield_now().await;
            }
            let n_open = open.load(Ordering::Relaxed);
            if conns.len() >= limits.max_connections
                || n_open >= limits.max_connections + EVICT_SLACK
            {
                drop(stream);
                continue;
            }
            let _ = stream.set_nodelay(true);
            open.fetch_add(1, Ordering::Relaxed);
            let guard = OpenGuard(Arc::clone(&open));
            let h = Arc::clone(&handler);
            let b = Arc::clone(&builder);
            let state = Arc::new(ConnState::new(conns.now_ms()));
            let (st, cs) = (Arc::clone(&state), Arc::clone(&conns));
            let task = tokio::spawn(async move {
                let _guard = guard;
                let _entry = EntryGuard(Arc::clone(&cs), Arc::as_ptr(&st) as usize);
                let service = hyper::service::service_fn(move |req| {
                    let r = answer(&*h, req);
                    // The next head is waited for from now on (keep-alive).
                    st.served.store(true, Ordering::Relaxed);
                    st.waiting_since_ms.store(cs.now_ms(), Ordering::Relaxed);
                    async move { Ok::<_, Infallible>(r) }
                });
                let _ = b.serve_connection(TokioIo::new(stream), service).await;
            });
            conns.add(state, task.abort_handle());
        }
    })
}

/// What the accept loop knows of one open connection.
struct ConnState {
    /// Milliseconds since the server started at which it began waiting for its current request
    /// head (opened, or its last request answered).
    waiting_since_ms: AtomicU64,
    /// It completed a request: a real client, closed only after every one that never did.
    served: AtomicBool,
}

impl ConnState {
    fn new(now_ms: u64) -> Self {
        ConnState {
            waiting_since_ms: AtomicU64::new(now_ms),
            served: AtomicBool::new(false),
        }
    }
}

/// The open connections, to choose which one to close when the cap is reached.
struct Conns {
    t0: Instant,
    list: Mutex<Vec<(Arc<ConnState>, tokio::task::AbortHandle)>>,
}

impl Conns {
    fn new() -> Self {
        Conns {
            t0: Instant::now(),
            list: Mutex::new(Vec::new()),
        }
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<ConnState>, tokio::task::AbortHandle)>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    fn add(&self, state: Arc<ConnState>, abort: tokio::task::AbortHandle) {
        // A connection that ended before it was listed is not listed.
        if !abort.is_finished() {
            self.lock().push((state, abort));
        }
    }

    fn remove(&self, key: usize) {
        self.lock().retain(|(s, _)| Arc::as_ptr(s) as usize != key);
    }

    /// Closes the connection that has waited longest for a request head, one that never
    /// completed a request first; one opened less than [`YOUNG_MS`] ago and not served yet only
    /// when every one is. False when there is none.
    fn evict_one(&self) -> bool {
        let now = self.now_ms();
        let mut list = self.lock();
        let victim = list
            .iter()
            .enumerate()
            .min_by_key(|(_, (s, _))| {
                let since = s.waiting_since_ms.load(Ordering::Relaxed);
                let served = s.served.load(Ordering::Relaxed);
                let just_opened = !served && now.saturating_sub(since) < YOUNG_MS;
                (just_opened, served, since)
            })
            .map(|(i, _)| i);
        match victim {
            Some(i) => {
                let (_, abort) = list.swap_remove(i);
                abort.abort();
                true
            }
            None => false,
        }
    }
}

/// Takes a connection off the list when its task ends (or is aborted).
struct EntryGuard(Arc<Conns>, usize);

impl Drop for EntryGuard {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// Counts a connection as open until dropped.
struct OpenGuard(Arc<AtomicUsize>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn answer<H: Fn(&str) -> Response>(handler: &H, req: Request<Incoming>) -> hyper::Response<Body> {
    // The request body is never read: hyper drains a short one or closes the connection, so a
    // body is never taken for a second request.
    let r = if req.method() == Method::GET || req.method() == Method::HEAD {
        handler(req.uri().path())
    } else {
        let mut resp = plain(
            StatusCode::METHOD_NOT_ALLOWED.as_u16(),
            "only GET and HEAD are supported\n",
        );
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    };
    let mut resp = hyper::Response::new(Body::new(r.body));
    *resp.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(r.content_type));
    resp
}

fn plain(status: u16, text: &'static str) -> hyper::Response<Body> {
    let mut resp = hyper::Response::new(Body::new(Bytes::from_static(text.as_bytes())));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Serves `/metrics` (and a link to it at `/`) from a thread of its own: `encode` of the state,
/// encoded again only when `generation` has moved.
pub(crate) fn spawn_metrics(
    listener: TcpListener,
    state: Arc<Mutex<super::LiveState>>,
    generation: Arc<AtomicU64>,
    content_type: &'static str,
    encode: impl Fn(&super::LiveState) -> String + Send + Sync + 'static,
) -> Result<(), Failure> {
    // The last exposition and the state generation it was encoded from: scrapes between two
    // samples share one encoding instead of each taking the state's lock to encode it again.
    let cache: Mutex<(u64, Bytes)> = Mutex::new((u64::MAX, Bytes::new()));
    let metrics = move || -> Bytes {
        let Ok(mut c) = cache.lock() else {
            return Bytes::from_static(b"# EOF\n");
        };
        let now = generation.load(Ordering::Acquire);
        if c.0 != now {
            let body = match state.lock() {
                Ok(s) => Bytes::from(encode(&s)),
                Err(_) => Bytes::from_static(b"# EOF\n"),
            };
            *c = (now, body);
        }
        c.1.clone()
    };
    std::thread::Builder::new()
        .name("gpufeed-http".into())
        .spawn(move || {
            let served = serve(listener, Limits::default(), move |path| match path {
                "/metrics" => Response {
                    status: 200,
                    content_type,
                    body: metrics(),
                },
                "/" => Response {
                    status: 200,
                    content_type: "text/html; charset=utf-8",
                    body: Bytes::from_static(
                        b"<html><body><a href=\"/metrics\">/metrics</a></body></html>\n",
                    ),
                },
                _ => Response {
                    status: 404,
                    content_type: "text/plain; charset=utf-8",
                    body: Bytes::from_static(b"not found: try /metrics\n"),
                },
            });
            if let Err(e) = served {
                eprintln!("gpufeed: {e}");
            }
        })
        .map_err(|e| Failure::new(Exit::Failure, format!("cannot start a thread: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    fn start(limits: Limits) -> SocketAddr {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            serve(l, limits, |path| Response {
                status: if path == "/metrics" { 200 } else { 404 },
                content_type: "text/plain",
                body: Bytes::from(format!("path {path}\n")),
            })
        });
        addr
    }

    fn connect(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }

    #[test]
    fn answers_get_keeps_alive_and_refuses_other_methods() {
        let addr = start(Limits::default());
        let mut s = connect(addr);
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap();
        let r = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.ends_with("path /metrics\n"));
        s.write_all(b"POST /x HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut rest = String::new();
        s.read_to_string(&mut rest).unwrap();
        assert!(rest.starts_with("HTTP/1.1 405"), "{rest}");
        assert!(
            rest.to_ascii_lowercase().contains("allow: get, head"),
            "{rest}"
        );
    }

    #[test]
    fn a_head_over_the_limit_gets_431_and_garbage_gets_400() {
        let addr = start(Limits::default());
        let mut s = connect(addr);
        let big = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(17 * 1024));
        let _ = s.write_all(big.as_bytes());
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        assert!(r.starts_with("HTTP/1.1 431"), "{r}");
        let mut s = connect(addr);
        s.write_all(b"\x01\x02 nonsense\r\n\r\n").unwrap();
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    }

    #[test]
    fn an_idle_connection_is_closed_after_the_head_timeout() {
        let addr = start(Limits {
            head_timeout: Duration::from_millis(300),
            ..Limits::default()
        });
        let mut s = connect(addr);
        let t = std::time::Instant::now();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // Closed without an answer (or with a 408, which hyper may send).
        let r = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(n == 0 || r.starts_with("HTTP/1.1 408"), "{r}");
    }

    #[test]
    fn over_the_cap_the_oldest_idle_connection_is_closed_for_the_new_one() {
        let addr = start(Limits {
            max_connections: 2,
            ..Limits::default()
        });
        let mut a = connect(addr);
        std::thread::sleep(Duration::from_millis(100));
        let _b = connect(addr);
        std::thread::sleep(Duration::from_millis(200));
        let mut c = connect(addr);
        c.write_all(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut r = String::new();
        c.read_to_string(&mut r).unwrap();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        let mut buf = [0u8; 16];
        assert_eq!(a.read(&mut buf).unwrap_or(0), 0, "the oldest is closed");
    }

    #[test]
    fn at_the_cap_the_slowest_head_makes_room_and_a_served_client_stays() {
        let addr = start(Limits {
            max_connections: 4,
            ..Limits::default()
        });
        // A real client, served once and kept alive.
        let mut kept = connect(addr);
        kept.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut buf = [0u8; 512];
        assert!(kept.read(&mut buf).unwrap() > 0);
        // Three slow heads fill the cap.
        let mut slow: Vec<TcpStream> = (0..3).map(|_| connect(addr)).collect();
        for s in &mut slow {
            s.write_all(b"G").unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        // A scrape at the cap is served at once; the oldest slow head was closed for it.
        for round in 0..3 {
            let t = std::time::Instant::now();
            let mut c = connect(addr);
            c.write_all(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut r = String::new();
            c.read_to_string(&mut r).unwrap();
            assert!(r.starts_with("HTTP/1.1 200"), "round {round}: {r}");
            assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
            slow.push(connect(addr));
            let _ = slow.last_mut().unwrap().write_all(b"G");
            std::thread::sleep(Duration::from_millis(50));
        }
        let oldest = &mut slow[0];
        oldest
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        assert_eq!(
            oldest.read(&mut buf).unwrap_or(0),
            0,
            "the oldest slow head is closed"
        );
        // The served keep-alive client was never chosen.
        kept.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let n = kept.read(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn scrapes_are_served_under_a_loris_that_first_completes_a_request() {
        let addr = start(Limits {
            max_connections: 8,
            ..Limits::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        // 48 connections for a cap of 8: each has one GET answered, then idles until closed, and
        // comes back 10 ms later.
        let lorises: Vec<_> = (0..48)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut s) = TcpStream::connect(addr) else {
                            continue;
                        };
                        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
                        let mut buf = [0u8; 512];
                        let _ = s.read(&mut buf);
                        loop {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            match s.read(&mut buf) {
                                Ok(0) => break,
                                Ok(_) => {}
                                Err(e)
                                    if e.kind() == std::io::ErrorKind::WouldBlock
                                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                                Err(_) => break,
                            }
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        let mut failed = Vec::new();
        for i in 0..30 {
            let t = std::time::Instant::now();
            let mut r = String::new();
            let ok = TcpStream::connect(addr).ok().is_some_and(|mut c| {
                let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                c.write_all(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
                    .is_ok()
                    && c.read_to_string(&mut r).is_ok()
                    && r.starts_with("HTTP/1.1 200")
            });
            if !ok || t.elapsed() > Duration::from_secs(1) {
                failed.push((i, t.elapsed(), r));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        for l in lorises {
            let _ = l.join();
        }
        assert!(failed.is_empty(), "scrapes failed: {failed:?}");
    }

    #[test]
    fn a_port_in_use_is_one_clear_error() {
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let e = bind(l.local_addr().unwrap()).unwrap_err().to_string();
        assert!(e.contains("another exporter is using the port"), "{e}");
    }
}
