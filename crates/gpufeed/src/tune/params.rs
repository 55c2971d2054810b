//! Knobs: `-L name v1,v2,...` lists, their Cartesian product and `{name}` substitution in the
//! command and in `--env NAME=template` values.

use super::TuneError;
use std::collections::BTreeMap;

/// One knob and the values to try, in the order given (taken as the order of cost: the sweet
/// spot prefers earlier values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    pub name: String,
    pub values: Vec<String>,
}

/// One setting: a value for every knob, with each value's position in its list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub values: Vec<(String, String)>,
    pub positions: Vec<usize>,
}

impl Setting {
    pub fn map(&self) -> BTreeMap<String, String> {
        self.values.iter().cloned().collect()
    }
    /// `workers=2 pin=1`.
    pub fn label(&self) -> String {
        self.values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
    /// Sum of list positions: how far into the lists (how costly) this setting is.
    pub(crate) fn cost(&self) -> usize {
        self.positions.iter().sum()
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Parses `-L` pairs (`name`, `v1,v2,...`).
pub fn parse_knobs(pairs: &[String]) -> Result<Vec<Knob>, TuneError> {
    let mut knobs: Vec<Knob> = Vec::new();
    for pair in pairs.chunks(2) {
        let [name, list] = pair else {
            return Err(TuneError::Usage(
                "-L needs a name and a list, e.g. -L workers 0,2,4".into(),
            ));
        };
        if !valid_name(name) {
            return Err(TuneError::Usage(format!(
                "bad knob name '{name}': use letters, digits, '_' or '-', e.g. -L workers 0,2,4"
            )));
        }
        if knobs.iter().any(|k| &k.name == name) {
            return Err(TuneError::Usage(format!(
                "knob '{name}' is given twice: put all its values in one list"
            )));
        }
        let values: Vec<String> = list.split(',').map(|v| v.trim().to_string()).collect();
        if values.iter().any(|v| v.is_empty()) {
            return Err(TuneError::Usage(format!(
                "knob '{name}': empty value in '{list}' (write e.g. -L {name} 0,2,4)"
            )));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(d) = values.iter().find(|v| !seen.insert(*v)) {
            return Err(TuneError::Usage(format!(
                "knob '{name}': value '{d}' is listed twice"
            )));
        }
        knobs.push(Knob {
            name: name.clone(),
            values,
        });
    }
    Ok(knobs)
}

/// Parses `--env NAME=template`.
pub(crate) fn parse_env(specs: &[String]) -> Result<Vec<(String, String)>, TuneError> {
    specs
        .iter()
        .map(|s| {
            let (k, v) = s.split_once('=').ok_or_else(|| {
                TuneError::Usage(format!(
                    "--env '{s}': expected NAME=VALUE, e.g. --env OMP_NUM_THREADS={{threads}}"
                ))
            })?;
            if k.is_empty() || k.contains('\0') || v.contains('\0') {
                return Err(TuneError::Usage(format!("--env '{s}': bad variable name")));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The Cartesian product, first knob varying slowest.
pub fn product(knobs: &[Knob]) -> Vec<Setting> {
    let mut out = vec![Setting {
        values: vec![],
        positions: vec![],
    }];
    for k in knobs {
        let mut next = Vec::with_capacity(out.len() * k.values.len());
        for s in &out {
            for (i, v) in k.values.iter().enumerate() {
                let mut s2 = s.clone();
                s2.values.push((k.name.clone(), v.clone()));
                s2.positions.push(i);
                next.push(s2);
            }
        }
        out = next;
    }
    out
}

/// Checks every knob appears as `{name}` in the command or in an environment template.
pub(crate) fn check_used(
    knobs: &[Knob],
    command: &[String],
    env: &[(String, String)],
) -> Result<(), TuneError> {
    for k in knobs {
        let pat = format!("{{{}}}", k.name);
        let used =
            command.iter().any(|a| a.contains(&pat)) || env.iter().any(|(_, v)| v.contains(&pat));
        if !used {
            return Err(TuneError::Usage(format!(
                "knob '{}' is not used: put {pat} in the command or in --env NAME={pat}",
                k.name
            )));
        }
    }
    Ok(())
}

/// A value as JSON: a number when it reads as one, else a string.
pub(crate) fn json_value(v: &str) -> serde_json::Value {
    if let Ok(i) = v.parse::<i64>() {
        return i.into();
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() && !v.starts_with('+') => serde_json::json!(f),
        _ => v.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::substitute;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn product_and_substitution() {
        let knobs = parse_knobs(&s(&["workers", "0,2,4", "pin", "0,1"])).unwrap();
        let p = product(&knobs);
        assert_eq!(p.len(), 6);
        assert_eq!(p[0].label(), "workers=0 pin=0");
        assert_eq!(p[1].label(), "workers=0 pin=1");
        assert_eq!(p[5].label(), "workers=4 pin=1");
        assert_eq!(p[5].cost(), 3);
        assert_eq!(
            substitute("--w {workers} --p={pin} {other}", &p[3].values),
            "--w 2 --p=1 {other}"
        );
    }

    #[test]
    fn substitution_is_one_pass() {
        let v = vec![
            ("a".to_string(), "{b}".to_string()),
            ("b".to_string(), "INJ".to_string()),
        ];
        assert_eq!(substitute("prog a={a} b={b}", &v), "prog a={b} b=INJ");
        assert_eq!(substitute("{{a}} {a", &v), "{{b}} {a");
        assert_eq!(substitute("}{}{a}é{", &v), "}{}{b}é{");
    }

    #[test]
    fn bad_lists_are_usage_errors() {
        assert!(parse_knobs(&s(&["workers"])).is_err());
        assert!(parse_knobs(&s(&["w k", "1"])).is_err());
        assert!(parse_knobs(&s(&["w", "1,,2"])).is_err());
        assert!(parse_knobs(&s(&["w", "1,1"])).is_err());
        assert!(parse_knobs(&s(&["w", "1", "w", "2"])).is_err());
        assert!(parse_env(&s(&["NOEQUALS"])).is_err());
        let knobs = parse_knobs(&s(&["w", "1,2"])).unwrap();
        let e = check_used(&knobs, &s(&["python", "x.py"]), &[]).unwrap_err();
        assert!(e.to_string().contains("{w}"), "{e}");
        let env = parse_env(&s(&["OMP_NUM_THREADS={w}"])).unwrap();
        check_used(&knobs, &s(&["python"]), &env).unwrap();
    }

    #[test]
    fn json_values() {
        assert_eq!(json_value("4"), serde_json::json!(4));
        assert_eq!(json_value("0.5"), serde_json::json!(0.5));
        assert_eq!(json_value("bf16"), serde_json::json!("bf16"));
        assert_eq!(json_value("nan"), serde_json::json!("nan"));
    }
}
