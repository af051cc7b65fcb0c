//! A sidecar's `/metrics` as data: the OpenMetrics text parsed into samples, and two
//! scrapes turned into `promtool test rules` input series, so alert rules are tested on
//! what a real sidecar exposes rather than on series written by hand.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

/// One sample: its name, its labels in order, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The series in PromQL's notation, with `extra` labels after its own.
    pub fn series(&self, extra: &[(&str, &str)]) -> String {
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra.iter().copied())
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        if labels.is_empty() {
            return self.name.clone();
        }
        format!("{}{{{}}}", self.name, labels.join(","))
    }
}

/// A parsed exposition: each family's type, and every sample.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub types: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (family, kind) = rest.split_once(' ').expect("# TYPE name type");
                scrape.types.insert(family.to_string(), kind.to_string());
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                scrape.samples.push(parse_sample(line));
            }
        }
        scrape
    }

    /// The value of the sample whose series (without extra labels) is `series`.
    pub fn get(&self, series: &str) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.series(&[]) == series)
            .map(|s| s.value)
    }

    /// Whether a sample named `name` counts up (a counter's, or a histogram's bucket, sum
    /// or count) rather than being a level.
    pub fn is_cumulative(&self, name: &str) -> bool {
        let kind = ["_total", "_bucket", "_sum", "_count", ""]
            .iter()
            .find_map(|suffix| self.types.get(name.strip_suffix(suffix)?));
        matches!(kind.map(String::as_str), Some("counter" | "histogram"))
    }

    /// Every sample name and label name seen.
    pub fn names(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let samples = self.samples.iter().map(|s| s.name.clone()).collect();
        let labels = self
            .samples
            .iter()
            .flat_map(|s| s.labels.iter().map(|(k, _)| k.clone()))
            .collect();
        (samples, labels)
    }
}

fn parse_sample(line: &str) -> Sample {
    let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("not a value: {line}")),
    };
    let Some((name, rest)) = series.split_once('{') else {
        return Sample {
            name: series.to_string(),
            labels: Vec::new(),
            value,
        };
    };
    let body = rest.strip_suffix('}').expect("labels end with }");
    Sample {
        name: name.to_string(),
        labels: parse_labels(body),
        value,
    }
}

fn parse_labels(body: &str) -> Vec<(String, String)> {
    let mut labels = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() {
            return labels;
        }
        assert_eq!(chars.next(), Some('"'), "label {name} has a quoted value");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.push((name.trim_start_matches(',').to_string(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

/// How two scrapes become a timeline of `steps` one-minute steps: the `before` scrape
/// holds for the first `hold` steps; from then on a counter grows each minute by what it
/// grew between the scrapes (the driven traffic, sustained), a level stays at its
/// `after` value, and an age (`*_age_seconds`) grows by a minute a minute, as it does
/// while nothing changes.
pub struct Timeline {
    pub hold: usize,
    pub steps: usize,
}

impl Timeline {
    /// `(series, values)` pairs for `promtool`'s `input_series`, each series with the
    /// `target` labels a scrape adds.
    pub fn input_series(
        &self,
        before: &Scrape,
        after: &Scrape,
        target: &[(&str, &str)],
    ) -> Vec<(String, String)> {
        after
            .samples
            .iter()
            .filter(|s| s.value.is_finite())
            .map(|sample| {
                let key = sample.series(&[]);
                let earlier = before.get(&key);
                let values: Vec<String> = (0..self.steps)
                    .map(|i| self.value_at(i, sample, earlier, after.is_cumulative(&sample.name)))
                    .map(|v| format!("{v}"))
                    .collect();
                (sample.series(target), values.join(" "))
            })
            .collect()
    }

    fn value_at(
        &self,
        step: usize,
        sample: &Sample,
        earlier: Option<f64>,
        cumulative: bool,
    ) -> f64 {
        let now = sample.value;
        if cumulative {
            let start = earlier.unwrap_or(0.0);
            // A counter that went down restarted: all of it is new.
            let grew = if now >= start { now - start } else { now };
            return match step.checked_sub(self.hold) {
                None => start,
                Some(k) => start + grew * (k + 1) as f64,
            };
        }
        match step.checked_sub(self.hold) {
            None => earlier.unwrap_or(now),
            Some(k) if sample.name.ends_with("_age_seconds") && now > 0.0 => now + 60.0 * k as f64,
            Some(_) => now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_timelines() {
        let text =
            "# TYPE c counter\nc_total{a=\"x\\\"y\",le=\"+Inf\"} 3\n# TYPE g gauge\ng 1\n# EOF\n";
        let scrape = Scrape::parse(text);
        assert_eq!(scrape.samples[0].labels[0], ("a".into(), "x\"y".into()));
        assert!(scrape.is_cumulative("c_total") && !scrape.is_cumulative("g"));
        let before = Scrape::parse("# TYPE c counter\nc_total{a=\"x\\\"y\",le=\"+Inf\"} 1\n");
        let series = Timeline { hold: 2, steps: 4 }.input_series(&before, &scrape, &[("pod", "p")]);
        assert_eq!(series[0].0, "c_total{a=\"x\\\"y\",le=\"+Inf\",pod=\"p\"}");
        assert_eq!(series[0].1, "1 1 3 5");
        assert_eq!(series[1].1, "1 1 1 1");
    }
}
