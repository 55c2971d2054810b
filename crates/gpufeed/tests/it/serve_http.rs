//! The limits of `gpufeed serve`'s HTTP server, on the real binary over loopback: head size
//! (431), head deadline and idle keep-alive timeout (10 s), connection cap under 1,000 idle
//! connections, 400 for malformed requests, bodies never taken for a request, `Allow` on 405,
//! `Connection: close` and HEAD.

use crate::common_fake;
use crate::{free_port, Reap};

use common_fake::{fake_nvml, scenario};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

const ONE_GPU: &str = r#"{"devices":[{"name":"NVIDIA H100 80GB HBM3","util":97}]}"#;

/// Starts `gpufeed serve` on a free loopback port and waits until it answers.
fn serve(dir: &Path) -> (Reap, u16) {
    let port = free_port();
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("gpufeed"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("GPUFEED_NVML_LIB", fake_nvml())
        .env("FAKE_NVML_SCENARIO", scenario(dir, ONE_GPU))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let g = Reap(child);
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        if let Some(r) = exchange(port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n") {
            if r.starts_with("HTTP/1.1 200") {
                return (g, port);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("gpufeed serve did not answer within 20 s");
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Sends `req` on a new connection and reads all that comes back until the server closes it
/// (or 3 s pass without a byte).
fn send_and_read(port: u16, req: &str) -> String {
    let mut s = connect(port);
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut r = Vec::new();
    let _ = s.read_to_end(&mut r);
    String::from_utf8_lossy(&r).into_owned()
}

/// Sends `req` and reads until the server closes: everything it answered.
fn exchange(port: u16, req: &[u8]) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    let _ = s.write_all(req);
    let mut r = Vec::new();
    let _ = s.read_to_end(&mut r);
    Some(String::from_utf8_lossy(&r).to_string())
}

fn responses(text: &str) -> usize {
    text.matches("HTTP/1.1 ").count()
}

#[test]
fn a_head_over_16_kib_gets_431_and_one_under_it_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (_g, port) = serve(dir.path());
    let long = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(17 * 1024)
    );
    let r = exchange(port, long.as_bytes()).unwrap();
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
    // A 100 MB request line is refused after 16 KiB, not buffered.
    let mut s = connect(port);
    let chunk = vec![b'a'; 1 << 20];
    let _ = s.write_all(b"GET /");
    let mut sent = 0usize;
    for _ in 0..100 {
        match s.write_all(&chunk) {
            Ok(()) => sent += chunk.len(),
            Err(_) => break,
        }
    }
    assert!(sent < 100 << 20, "the server kept reading {sent} bytes");
    let ok = format!(
        "GET /metrics HTTP/1.1\r\nX-Pad: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(15 * 1024)
    );
    let r = exchange(port, ok.as_bytes()).unwrap();
    assert!(r.starts_with("HTTP/1.1 200"), "{}", &r[..r.len().min(200)]);
}

#[test]
fn a_slow_head_is_cut_at_10_s_and_an_idle_keep_alive_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let (_g, port) = serve(dir.path());
    // Slow client: one header byte every 500 ms, never finishing.
    let slow = std::thread::spawn(move || {
        let mut s = connect(port);
        let t = Instant::now();
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n");
        while t.elapsed() < Duration::from_secs(30) {
            if s.write_all(b"X").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            let _ = s.set_nonblocking(true);
            let mut b = [0u8; 256];
            let r = s.read(&mut b);
            let _ = s.set_nonblocking(false);
            match r {
                Ok(0) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&b[..n]).to_string();
                    assert!(!text.contains(" 200 "), "a slow client got {text}");
                    break;
                }
                Err(_) => {}
            }
        }
        t.elapsed()
    });
    // Idle after one answer: closed at the same deadline.
    let mut s = connect(port);
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Drain the rest of the answer, then time the close.
    let t = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let idle = t.elapsed();
    assert!(
        idle >= Duration::from_secs(8) && idle < Duration::from_secs(15),
        "idle connection closed after {idle:?}"
    );
    let slow = slow.join().unwrap();
    assert!(
        slow < Duration::from_secs(15),
        "the slow client stayed {slow:?}"
    );
}

#[test]
fn malformed_requests_get_400_and_other_methods_405_with_allow() {
    let dir = tempfile::tempdir().unwrap();
    let (_g, port) = serve(dir.path());
    for bad in [
        &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"GET /metrics HTTP/9.9\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nContent-Length: x\r\n\r\n",
    ] {
        let r = exchange(port, bad).unwrap();
        assert!(
            r.starts_with("HTTP/1.1 400")
                || (r.is_empty() && bad.starts_with(b"GET /metrics HTTP/9")),
            "{:?} got {r:?}",
            String::from_utf8_lossy(bad)
        );
    }
    for method in ["POST", "PUT", "DELETE", "OPTIONS"] {
        let r = exchange(
            port,
            format!("{method} /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        assert!(r.starts_with("HTTP/1.1 405"), "{method}: {r}");
        assert!(
            r.to_ascii_lowercase().contains("\r\nallow: get, head\r\n"),
            "{r}"
        );
    }
}

#[test]
fn a_body_is_never_taken_for_a_second_request() {
    let dir = tempfile::tempdir().unwrap();
    let (_g, port) = serve(dir.path());
    let inner = "GET /metrics HTTP/1.1\r\n\r\n";
    for method in ["POST", "GET"] {
        let req = format!(
            "{method} / HTTP/1.1\r\nContent-Length: {}\r\n\r\n{inner}",
            inner.len()
        );
        let r = send_and_read(port, &req);
        assert_eq!(responses(&r), 1, "{method}: {r}");
    }
    // Chunked body too.
    let req = format!(
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{inner}\r\n0\r\n\r\n",
        inner.len()
    );
    assert_eq!(responses(&send_and_read(port, &req)), 1);
}

#[test]
fn connection_close_is_honoured_and_head_has_no_body() {
    let dir = tempfile::tempdir().unwrap();
    let (_g, port) = serve(dir.path());
    let t = Instant::now();
    let r = exchange(port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "not closed: {:?}",
        t.elapsed()
    );
    assert!(r.starts_with("HTTP/1.1 200"));
    assert!(r.ends_with("# EOF\n"), "{r}");
    let t = Instant::now();
    // HTTP/1.0 without keep-alive: answered in 1.0 and closed.
    let r = exchange(port, b"HEAD /metrics HTTP/1.0\r\n\r\n").unwrap();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(r.starts_with("HTTP/1.0 200"), "{r}");
    let (_, body) = r.split_once("\r\n\r\n").unwrap();
    assert!(body.is_empty(), "{body}");
    // Two requests in one write (pipelined) get two answers in order.
    let r = exchange(
        port,
        b"GET /nope HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    assert_eq!(responses(&r), 2);
    assert!(r.starts_with("HTTP/1.1 404"));
}

fn proc_status(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn a_thousand_idle_connections_keep_threads_and_memory_bounded_and_a_scrape_gets_through() {
    let dir = tempfile::tempdir().unwrap();
    let (g, port) = serve(dir.path());
    let pid = g.0.id();
    let threads0 = proc_status(pid, "Threads:");
    // 1,000 client sockets need more than the common 1,024 soft limit with the test harness's own.
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        let mut l: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < 4096 {
            l.rlim_cur = l.rlim_max.min(4096);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
    let mut idle = Vec::new();
    for _ in 0..1000 {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connect failed after {} connections: {e}", idle.len()),
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let threads = proc_status(pid, "Threads:");
    let rss_kb = proc_status(pid, "VmRSS:");
    let fds = open_fds(pid);
    eprintln!(
        "1000 idle connections: {threads} threads (before: {threads0}), {fds} fds, RSS {rss_kb} kB"
    );
    assert_eq!(threads, threads0, "threads grew with connections");
    assert!(fds < 300, "{fds} descriptors open");
    assert!(rss_kb < 100 * 1024, "RSS {rss_kb} kB");
    // Once the idle connections time out (10 s), a scrape is served again.
    let end = Instant::now() + Duration::from_secs(20);
    let mut served = None;
    while Instant::now() < end {
        if let Some(r) = exchange(port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n") {
            if r.starts_with("HTTP/1.1 200") {
                served = Some(Instant::now());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(served.is_some(), "no scrape served within 20 s");
    drop(idle);
}

/// Slowloris (issue 27, item 4): 300 connections, each sending one byte of a request head per
/// second and reconnecting when closed, for 6 s; meanwhile a scrape every 0.5 s on a new
/// connection. Every scrape is answered, the slowest within 50 ms (the p99 of the issue's goal;
/// with 12 scrapes the p99 is the slowest).
#[test]
fn three_hundred_slowloris_connections_do_not_block_scrapes() {
    let dir = tempfile::tempdir().unwrap();
    let (_g, port) = serve(dir.path());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let attack = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let head = b"GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            let open = |_| {
                let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
                s.set_nonblocking(true).ok()?;
                Some((s, 0usize))
            };
            let mut conns: Vec<Option<(TcpStream, usize)>> = (0..300).map(open).collect();
            let (mut reconnects, mut sent) = (0u64, 0u64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for slot in conns.iter_mut() {
                    let alive = slot.as_mut().is_some_and(|(s, i)| {
                        let mut b = [0u8; 64];
                        // A closed connection reads EOF (or fails); an open one would block.
                        let closed = matches!(s.read(&mut b), Ok(0))
                            || s.write(&head[*i % head.len()..][..1]).is_err();
                        *i += 1;
                        !closed
                    });
                    if alive {
                        sent += 1;
                    } else {
                        reconnects += 1;
                        *slot = open(0);
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            (reconnects, sent)
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    let mut took = Vec::new();
    for _ in 0..12 {
        let t = Instant::now();
        let r = exchange(port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n");
        took.push((
            t.elapsed(),
            r.is_some_and(|r| r.starts_with("HTTP/1.1 200")),
        ));
        std::thread::sleep(Duration::from_millis(500).saturating_sub(t.elapsed()));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reconnects, sent) = attack.join().unwrap();
    let answered = took.iter().filter(|(_, ok)| *ok).count();
    let slowest = took.iter().map(|(d, _)| *d).max().unwrap();
    eprintln!(
        "slowloris: {answered}/12 scrapes answered, slowest {slowest:?}; attacker sent {sent} \
         bytes, reconnected {reconnects} times"
    );
    assert!(
        sent > 600,
        "the attack did not hold its connections ({sent} bytes)"
    );
    assert_eq!(answered, 12, "{took:?}");
    assert!(slowest <= Duration::from_millis(50), "{took:?}");
}
