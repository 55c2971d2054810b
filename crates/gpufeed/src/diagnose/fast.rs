//! A specialised reader for the three line types that make up almost all of a recording
//! (`gpu`, `host`, `procs`): a single pass over the bytes, no allocation per line (buffers are
//! reused), numbers parsed in place. Anything it does not expect (escapes in keys, exponents it
//! cannot do exactly, a missing required field) makes it give up on that line, and the caller
//! falls back to serde: the result is the same either way, only faster here.

use crate::sample::{DiskRate, GpuSample, HostSample, ProcSample};

/// Exact powers of ten as f64 (10^0 ..= 10^22 are exactly representable).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(c) = self.b.get(self.i) {
            if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        if self.peek()? == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// A string without escapes (keys, device names, state letters).
    #[inline]
    fn plain_str(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        // Keys and short values: a plain loop beats memchr's set-up cost.
        let mut i = start;
        loop {
            match *self.b.get(i)? {
                b'"' => break,
                b'\\' => return None,
                _ => i += 1,
            }
        }
        self.i = i + 1;
        Some(&self.b[start..i])
    }

    #[inline]
    fn null(&mut self) -> bool {
        self.ws();
        if self.b[self.i..].starts_with(b"null") {
            self.i += 4;
            true
        } else {
            false
        }
    }

    /// A JSON number, exactly as `str::parse::<f64>` would give it.
    #[inline]
    fn f64(&mut self) -> Option<f64> {
        self.ws();
        let b = self.b;
        let start = self.i;
        let mut i = start;
        let neg = b.get(i) == Some(&b'-');
        if neg {
            i += 1;
        }
        let mut mant: u64 = 0;
        let mut digits = 0usize;
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            mant = mant.wrapping_mul(10).wrapping_add((d - b'0') as u64);
            digits += 1;
            i += 1;
        }
        let mut frac = 0usize;
        if b.get(i) == Some(&b'.') {
            i += 1;
            while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
                mant = mant.wrapping_mul(10).wrapping_add((d - b'0') as u64);
                digits += 1;
                frac += 1;
                i += 1;
            }
        }
        let exp = matches!(b.get(i), Some(b'e' | b'E'));
        if digits == 0 {
            return None;
        }
        if exp || digits > 15 {
            // Rare: hand it to the exact general parser.
            while let Some(c) = b.get(i) {
                if c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-') {
                    i += 1;
                } else {
                    break;
                }
            }
            let s = std::str::from_utf8(&b[start..i]).ok()?;
            self.i = i;
            return s.parse().ok();
        }
        self.i = i;
        // mant < 10^15 < 2^53 and 10^frac exact: one correctly rounded division.
        let v = mant as f64 / POW10[frac];
        Some(if neg { -v } else { v })
    }

    #[inline]
    fn opt_f64(&mut self) -> Option<Option<f64>> {
        if self.null() {
            Some(None)
        } else {
            self.f64().map(Some)
        }
    }

    /// A non-negative integer (counters, pids).
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        self.ws();
        let b = self.b;
        let mut i = self.i;
        let mut v: u64 = 0;
        let start = i;
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            v = v.wrapping_mul(10).wrapping_add((d - b'0') as u64);
            i += 1;
        }
        // Up to 19 digits cannot overflow; longer ones go to serde.
        if i == start || i - start > 19 || matches!(b.get(i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        self.i = i;
        Some(v)
    }

    #[inline]
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.null() {
            Some(None)
        } else {
            self.u64().map(Some)
        }
    }

    #[inline]
    fn opt_u32(&mut self) -> Option<Option<u32>> {
        match self.opt_u64()? {
            Some(v) => u32::try_from(v).ok().map(Some),
            None => Some(None),
        }
    }

    /// Skips any JSON value.
    fn skip(&mut self) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'"' => {
                self.i += 1;
                loop {
                    let rel = memchr::memchr2(b'"', b'\\', &self.b[self.i..])?;
                    let at = self.i + rel;
                    if self.b[at] == b'\\' {
                        self.i = at + 2;
                    } else {
                        self.i = at + 1;
                        return Some(());
                    }
                }
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                while let Some(c) = self.peek() {
                    match c {
                        b'"' => {
                            self.skip()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
                None
            }
            _ => {
                while let Some(c) = self.peek() {
                    if matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace() {
                        break;
                    }
                    self.i += 1;
                }
                Some(())
            }
        }
    }

    /// Walks an object's members; `f` parses the value of keys it knows (returning true) and
    /// leaves the others to be skipped (returning false).
    #[inline]
    fn object(&mut self, mut f: impl FnMut(&'a [u8], &mut Cur<'a>) -> Option<bool>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.plain_str()?;
            self.eat(b':')?;
            if !f(key, self)? {
                self.skip()?;
            }
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Walks an array's elements with `f`.
    #[inline]
    fn array(&mut self, mut f: impl FnMut(&mut Cur<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Some(());
        }
        loop {
            f(self)?;
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.b.len()).then_some(())
    }
}

/// Parses a `gpu` line into `out` (its buffers are reused). `None`: use serde for this line.
pub fn gpu(line: &[u8], out: &mut GpuSample) -> Option<()> {
    let mut samples = out.util_samples.take().unwrap_or_default();
    samples.clear();
    *out = GpuSample::default();
    let mut c = Cur { b: line, i: 0 };
    let (mut has_index, mut has_t, mut has_samples) = (false, false, false);
    c.object(|k, c| {
        match k {
            b"type" => {
                if c.plain_str()? != b"gpu" {
                    return None;
                }
            }
            b"index" => {
                out.index = u32::try_from(c.u64()?).ok()?;
                has_index = true;
            }
            b"t_s" => {
                out.t_s = c.f64()?;
                has_t = true;
            }
            b"util_samples" => {
                if !c.null() {
                    c.array(|c| {
                        c.eat(b'[')?;
                        let t = c.f64()?;
                        c.eat(b',')?;
                        let v = c.f64()?;
                        c.eat(b']')?;
                        samples.push([t, v]);
                        Some(())
                    })?;
                    has_samples = true;
                }
            }
            b"util_pct" => out.util_pct = c.opt_f64()?,
            b"mem_util_pct" => out.mem_util_pct = c.opt_f64()?,
            b"mem_used_bytes" => out.mem_used_bytes = c.opt_u64()?,
            b"sm_clock_mhz" => out.sm_clock_mhz = c.opt_u32()?,
            b"power_w" => out.power_w = c.opt_f64()?,
            b"temperature_c" => out.temperature_c = c.opt_u32()?,
            b"pcie_rx_bytes" => out.pcie_rx_bytes = c.opt_u64()?,
            b"pcie_tx_bytes" => out.pcie_tx_bytes = c.opt_u64()?,
            b"pcie_rx_bytes_per_s" => out.pcie_rx_bytes_per_s = c.opt_f64()?,
            b"pcie_tx_bytes_per_s" => out.pcie_tx_bytes_per_s = c.opt_f64()?,
            b"pcie_gen" => out.pcie_gen = c.opt_u32()?,
            b"pcie_width" => out.pcie_width = c.opt_u32()?,
            b"throttle_reasons" => out.throttle_reasons = c.opt_u64()?,
            // Per-process GPU lists are not used by the diagnosis.
            _ => return Some(false),
        }
        Some(true)
    })?;
    c.end()?;
    if !(has_index && has_t) {
        return None;
    }
    out.util_samples = has_samples.then_some(samples);
    Some(())
}

/// Parses a `host` line into `out` (buffers reused; disk names are not kept).
pub fn host(line: &[u8], out: &mut HostSample) -> Option<()> {
    let mut cpus = std::mem::take(&mut out.cpu_pct);
    let mut disks = std::mem::take(&mut out.disks);
    cpus.clear();
    disks.clear();
    *out = HostSample::default();
    let mut c = Cur { b: line, i: 0 };
    let (mut has_t, mut has_cpu, mut has_disks) = (false, false, false);
    c.object(|k, c| {
        match k {
            b"type" => {
                if c.plain_str()? != b"host" {
                    return None;
                }
            }
            b"t_s" => {
                out.t_s = c.f64()?;
                has_t = true;
            }
            b"cpu_pct" => {
                c.array(|c| {
                    cpus.push(c.f64()?);
                    Some(())
                })?;
                has_cpu = true;
            }
            b"cpu_total_pct" => out.cpu_total_pct = c.opt_f64()?,
            b"iowait_pct" => out.iowait_pct = c.opt_f64()?,
            b"mem_total_bytes" => out.mem_total_bytes = c.opt_u64()?,
            b"mem_available_bytes" => out.mem_available_bytes = c.opt_u64()?,
            b"mem_cached_bytes" => out.mem_cached_bytes = c.opt_u64()?,
            b"swap_total_bytes" => out.swap_total_bytes = c.opt_u64()?,
            b"swap_free_bytes" => out.swap_free_bytes = c.opt_u64()?,
            b"psi_cpu_some_pct" => out.psi_cpu_some_pct = c.opt_f64()?,
            b"psi_io_some_pct" => out.psi_io_some_pct = c.opt_f64()?,
            b"psi_io_full_pct" => out.psi_io_full_pct = c.opt_f64()?,
            b"psi_mem_some_pct" => out.psi_mem_some_pct = c.opt_f64()?,
            b"psi_mem_full_pct" => out.psi_mem_full_pct = c.opt_f64()?,
            b"disks" => {
                c.array(|c| {
                    let (mut r, mut w) = (None, None);
                    let mut named = false;
                    c.object(|k, c| {
                        match k {
                            b"device" => {
                                c.skip()?;
                                named = true;
                            }
                            b"read_bytes_per_s" => r = Some(c.f64()?),
                            b"write_bytes_per_s" => w = Some(c.f64()?),
                            _ => return Some(false),
                        }
                        Some(true)
                    })?;
                    if !named {
                        return None;
                    }
                    disks.push(DiskRate {
                        device: String::new(),
                        read_bytes_per_s: r?,
                        write_bytes_per_s: w?,
                    });
                    Some(())
                })?;
                has_disks = true;
            }
            _ => return Some(false),
        }
        Some(true)
    })?;
    c.end()?;
    if !(has_t && has_cpu && has_disks) {
        return None;
    }
    out.cpu_pct = cpus;
    out.disks = disks;
    Some(())
}

/// Parses a `procs` line: its time, and the samples into `out` (reused).
pub fn procs(line: &[u8], out: &mut Vec<ProcSample>) -> Option<f64> {
    out.clear();
    let mut c = Cur { b: line, i: 0 };
    let mut t = None;
    let mut has_procs = false;
    c.object(|k, c| {
        match k {
            b"type" => {
                if c.plain_str()? != b"procs" {
                    return None;
                }
            }
            b"t_s" => t = Some(c.f64()?),
            b"procs" => {
                c.array(|c| {
                    let mut p = ProcSample::default();
                    let mut has_pid = false;
                    c.object(|k, c| {
                        match k {
                            b"pid" => {
                                p.pid = u32::try_from(c.u64()?).ok()?;
                                has_pid = true;
                            }
                            b"cpu_pct" => p.cpu_pct = c.opt_f64()?,
                            b"rss_bytes" => p.rss_bytes = c.opt_u64()?,
                            b"read_bytes" => p.read_bytes = c.opt_u64()?,
                            b"write_bytes" => p.write_bytes = c.opt_u64()?,
                            b"state" => {
                                if !c.null() {
                                    let s = c.plain_str()?;
                                    if s.len() != 1 || !s[0].is_ascii() {
                                        return None;
                                    }
                                    p.state = Some(s[0] as char);
                                }
                            }
                            b"threads" => p.threads = c.opt_u32()?,
                            b"voluntary_ctxt_switches" => {
                                p.voluntary_ctxt_switches = c.opt_u64()?
                            }
                            b"nonvoluntary_ctxt_switches" => {
                                p.nonvoluntary_ctxt_switches = c.opt_u64()?
                            }
                            _ => return Some(false),
                        }
                        Some(true)
                    })?;
                    if !has_pid {
                        return None;
                    }
                    out.push(p);
                    Some(())
                })?;
                has_procs = true;
            }
            _ => return Some(false),
        }
        Some(true)
    })?;
    c.end()?;
    if !has_procs {
        return None;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::format::Line;

    fn serde_gpu(l: &str) -> GpuSample {
        match serde_json::from_str::<Line>(l).unwrap() {
            Line::Gpu(g) => g,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gpu_lines_match_serde() {
        let lines = [
            r#"{"type":"gpu","index":0,"t_s":0.200208608,"util_samples":[[0.166238,85.0]],"util_pct":85.0,"mem_util_pct":0.0,"mem_used_bytes":80000000000,"sm_clock_mhz":1980,"power_w":70.0,"temperature_c":40,"pcie_rx_bytes":401503284,"pcie_tx_bytes":0,"pcie_rx_bytes_per_s":null,"pcie_tx_bytes_per_s":null,"pcie_gen":null,"pcie_width":null,"throttle_reasons":0}"#,
            r#"{"type":"gpu","index":1,"t_s":0.000695457,"util_samples":[],"util_pct":50.0,"mem_util_pct":0.0,"mem_used_bytes":0,"sm_clock_mhz":1980,"power_w":70.0,"temperature_c":40,"pcie_rx_bytes":0,"pcie_tx_bytes":0,"pcie_rx_bytes_per_s":null,"pcie_tx_bytes_per_s":null,"pcie_gen":5,"pcie_width":16,"throttle_reasons":0,"processes":[{"pid":7,"used_memory_bytes":null,"sm_util_pct":3}]}"#,
            r#"{"type":"gpu","index":2,"t_s":1e-3,"util_samples":null,"util_pct":12.345678901234567,"power_w":-1.5E2, "pcie_rx_bytes_per_s":123456.789}"#,
            r#"{"t_s":3.25,"type":"gpu","index":3,"util_samples":[[1.0,2.0],[3.0,4.5]],"new_field":{"a":[1,"x\"y"]}}"#,
        ];
        let mut g = GpuSample::default();
        for l in lines {
            gpu(l.as_bytes(), &mut g).unwrap_or_else(|| panic!("fast path gave up on {l}"));
            let mut want = serde_gpu(l);
            want.processes = None;
            assert_eq!(g, want, "{l}");
        }
    }

    #[test]
    fn unusual_gpu_lines_fall_back() {
        let mut g = GpuSample::default();
        for l in [
            r#"{"type":"gpu","t_s":1.0}"#,
            r#"{"type":"gpu","index":0,"t_s":1.0"#,
            r#"{"type":"gpu","index":0,"t_s":1.0,"a\"b":1}"#,
            r#"{"type":"host","index":0,"t_s":1.0}"#,
            r#"{"type":"gpu","index":0,"t_s":1.0} trailing"#,
            r#"{"type":"gpu","index":-1,"t_s":1.0}"#,
        ] {
            assert!(gpu(l.as_bytes(), &mut g).is_none(), "{l}");
        }
    }

    #[test]
    fn host_and_procs_lines_match_serde() {
        let h = r#"{"type":"host","t_s":0.300156467,"cpu_pct":[0.0,12.5,100.0],"cpu_total_pct":37.5,"iowait_pct":0.0,"mem_total_bytes":25275990016,"mem_available_bytes":24422350848,"mem_cached_bytes":12228521984,"swap_total_bytes":0,"swap_free_bytes":0,"psi_cpu_some_pct":0.0,"psi_io_some_pct":1.5,"psi_io_full_pct":null,"psi_mem_some_pct":0.0,"psi_mem_full_pct":0.0,"disks":[{"device":"vda","read_bytes_per_s":1000.5,"write_bytes_per_s":0.0},{"device":"zram0","read_bytes_per_s":0.0,"write_bytes_per_s":2.0}]}"#;
        let mut got = HostSample::default();
        host(h.as_bytes(), &mut got).unwrap();
        let Line::Host(mut want) = serde_json::from_str::<Line>(h).unwrap() else {
            panic!()
        };
        for d in &mut want.disks {
            d.device.clear();
        }
        assert_eq!(got, want);

        let p = r#"{"type":"procs","t_s":0.2,"procs":[{"pid":28423,"cpu_pct":0.0,"rss_bytes":1462272,"read_bytes":0,"write_bytes":0,"state":"S","threads":1},{"pid":28426,"cpu_pct":99.5,"rss_bytes":null,"read_bytes":null,"write_bytes":null,"state":"D","threads":4,"voluntary_ctxt_switches":5}]}"#;
        let mut got = Vec::new();
        assert_eq!(procs(p.as_bytes(), &mut got), Some(0.2));
        let Line::Procs { procs: want, .. } = serde_json::from_str::<Line>(p).unwrap() else {
            panic!()
        };
        assert_eq!(got, want);
        assert!(procs(
            br#"{"type":"procs","t_s":0.2,"procs":[{"pid":1,"state":"\u0044"}]}"#,
            &mut got
        )
        .is_none());
    }

    #[test]
    fn numbers_are_exact() {
        for s in [
            "0.1",
            "85.0",
            "0.166238",
            "123456789012345",
            "1e-3",
            "-2.5",
            "1234567890123456789",
            "3.14159265358979",
        ] {
            let mut c = Cur {
                b: s.as_bytes(),
                i: 0,
            };
            assert_eq!(c.f64(), s.parse::<f64>().ok(), "{s}");
        }
    }
}
