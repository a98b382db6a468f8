//! Quotas per user: what one user may spend across all their sessions in a calendar day and a
//! calendar month (UTC), and how many runs they may have going at once.
//!
//! A quota file (`weft serve --quotas FILE`, `weft worker --quotas FILE`) gives a `default` and
//! `users` by name; a user listed there has exactly the quota given there, the others the
//! default. What a user spent is kept by the store, one counter per (user, period), added to
//! after every model call with what the call used ([`Used`]); the check before a model call
//! ([`check`]) adds what the call may cost at most ([`crate::budget::call_max`]), as a budget's
//! does, and reaching a quota is recorded as a budget is (`budget_exceeded` with `which` =
//! `user.day.cost_usd`, ...). The pure parts are here; the counters are `weft_store::Usage`'s,
//! the check before each call is the runtime's (`weft_runtime::quota`).

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, NaiveDate, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::budget::{CallMax, QUOTA_PREFIX, Reached, Spent};
use crate::diagnose::Problem;

/// A quota file: the default quota and the quotas of named users.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaFile {
    /// The quota of every user not listed under `users` (none: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Quota>,
    /// Quotas by user name (as the key file names users); each replaces the default as a whole.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, Quota>,
}

/// What one user may spend per calendar day and month (UTC), and runs at once.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Limits per calendar day (UTC), reset at midnight.
    #[serde(default, skip_serializing_if = "QuotaLimits::is_empty")]
    pub day: QuotaLimits,
    /// Limits per calendar month (UTC), reset on its first day.
    #[serde(default, skip_serializing_if = "QuotaLimits::is_empty")]
    pub month: QuotaLimits,
    /// Runs of this user that may be going at once (running sessions: queued or driven).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_at_once: Option<u64>,
}

/// The limits of one period. Every limit is optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaLimits {
    /// Input (prompt) tokens of model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens of model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Input and output tokens together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost of model calls in US dollars, at the models' prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub cost_usd: Option<f64>,
}

impl QuotaLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

impl Quota {
    /// The limits of `period`.
    pub fn limits(&self, period: Period) -> &QuotaLimits {
        match period {
            Period::Day => &self.day,
            Period::Month => &self.month,
        }
    }

    /// Whether a limit on what model calls spend is set in either period (`runs_at_once` is
    /// not one).
    pub fn limits_spending(&self) -> bool {
        !self.day.is_empty() || !self.month.is_empty()
    }

    /// Whether a cost limit is set in either period.
    pub fn has_cost(&self) -> bool {
        self.day.cost_usd.is_some() || self.month.cost_usd.is_some()
    }
}

impl QuotaFile {
    /// Reads a quota file's text (YAML). Every problem names its field and, where it was found,
    /// its line and column; [`Problem::in_file`] puts the file's name before it.
    pub fn parse(text: &str) -> Result<Self, Vec<Problem>> {
        let file: Self = serde_yaml_ng::from_str(text).map_err(|e| vec![Problem::yaml(&e)])?;
        let problems: Vec<Problem> = file
            .problems()
            .into_iter()
            .map(|p| p.located(text))
            .collect();
        if problems.is_empty() {
            Ok(file)
        } else {
            Err(problems)
        }
    }

    /// The problems YAML's reader cannot see: a cost that is negative or not a number, a user
    /// with an empty name.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        let quotas = self
            .default
            .iter()
            .map(|q| ("default".to_owned(), q))
            .chain(self.users.iter().map(|(u, q)| (format!("users.{u}"), q)));
        for (at, q) in quotas {
            for period in Period::ALL {
                if let Some(c) = q.limits(period).cost_usd
                    && !(c.is_finite() && c >= 0.0)
                {
                    out.push(Problem::new(
                        format!("{at}.{}.cost_usd", period.name()),
                        format!("{c} is not a cost; give a number of US dollars, 0 or more"),
                    ));
                }
            }
        }
        if self.users.keys().any(|u| u.trim().is_empty()) {
            out.push(Problem::new(
                "users",
                "a user with an empty name; name each user as the key file does",
            ));
        }
        out
    }

    /// The quota of `user`: theirs when listed, else the default; `None` when neither is set.
    pub fn for_user(&self, user: &str) -> Option<&Quota> {
        self.users.get(user).or(self.default.as_ref())
    }
}

/// A calendar period a quota counts over (UTC).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// A calendar day.
    Day,
    /// A calendar month.
    Month,
}

impl Period {
    /// Every period, shortest first.
    pub const ALL: [Period; 2] = [Period::Day, Period::Month];

    /// `day` or `month`, as the quota file and `which` name it.
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// The key of the period that holds `now_ms` (Unix milliseconds): `day:2026-11-26`,
    /// `month:2026-11`. The store keeps one counter per user and key, so a new period starts
    /// from zero without anything being reset.
    pub fn key(self, now_ms: i64) -> String {
        let d = date(now_ms);
        match self {
            Period::Day => format!("day:{:04}-{:02}-{:02}", d.year(), d.month(), d.day()),
            Period::Month => format!("month:{:04}-{:02}", d.year(), d.month()),
        }
    }

    /// When the period that holds `now_ms` ends and the next one starts from zero, Unix ms.
    pub fn resets_at(self, now_ms: i64) -> i64 {
        let d = date(now_ms);
        let next = match self {
            Period::Day => d.succ_opt(),
            Period::Month if d.month() == 12 => NaiveDate::from_ymd_opt(d.year() + 1, 1, 1),
            Period::Month => NaiveDate::from_ymd_opt(d.year(), d.month() + 1, 1),
        };
        next.and_then(|n| n.and_hms_opt(0, 0, 0))
            .map_or(i64::MAX, |t| t.and_utc().timestamp_millis())
    }
}

/// A Unix time in ms as people read it, `2026-11-27T00:00:00Z`.
pub fn utc_text(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// The calendar day (UTC) of `ms`; out of chrono's range, the epoch's (never reached by a clock).
fn date(ms: i64) -> NaiveDate {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .date_naive()
}

/// What a user spent in one period (or what one model call used): the counters the store keeps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Used {
    /// Input tokens of model calls.
    pub input_tokens: u64,
    /// Output tokens of model calls.
    pub output_tokens: u64,
    /// US dollars of model calls with known prices.
    pub cost_usd: f64,
    /// Model calls, replies and failures.
    pub model_calls: u64,
}

impl Used {
    /// What was spent between `before` and `after`, two readings of one session's spending.
    pub fn between(before: &Spent, after: &Spent) -> Self {
        Self {
            input_tokens: after.input_tokens.saturating_sub(before.input_tokens),
            output_tokens: after.output_tokens.saturating_sub(before.output_tokens),
            cost_usd: (after.cost_usd - before.cost_usd).max(0.0),
            model_calls: after.model_calls.saturating_sub(before.model_calls),
        }
    }

    /// What a model call may use at most.
    pub fn at_most(max: &CallMax) -> Self {
        Self {
            input_tokens: max.input_tokens,
            output_tokens: max.output_tokens,
            cost_usd: max.cost_usd.unwrap_or(0.0),
            model_calls: 1,
        }
    }

    /// Whether nothing was used.
    pub fn is_zero(&self) -> bool {
        self == &Self::default()
    }

    /// `self` with `other` added.
    #[must_use]
    pub fn plus(&self, other: &Used) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cost_usd: self.cost_usd + other.cost_usd,
            model_calls: self.model_calls.saturating_add(other.model_calls),
        }
    }
}

/// The first limit of `quota` in `period` that `used` plus `add` would cross, as a budget's
/// check reports one (`which` = `user.day.cost_usd`). With nothing to add (`add` zero) it is
/// the first limit `used` has reached already: a user at their quota may start nothing.
pub fn check(quota: &Quota, period: Period, used: &Used, add: &Used) -> Option<Reached> {
    let l = quota.limits(period);
    let measures: [(&str, Option<f64>, f64, f64); 4] = [
        (
            "input_tokens",
            l.input_tokens.map(|n| n as f64),
            used.input_tokens as f64,
            add.input_tokens as f64,
        ),
        (
            "output_tokens",
            l.output_tokens.map(|n| n as f64),
            used.output_tokens as f64,
            add.output_tokens as f64,
        ),
        (
            "tokens",
            l.tokens.map(|n| n as f64),
            used.input_tokens.saturating_add(used.output_tokens) as f64,
            add.input_tokens.saturating_add(add.output_tokens) as f64,
        ),
        ("cost_usd", l.cost_usd, used.cost_usd, add.cost_usd),
    ];
    for (name, limit, spent, call) in measures {
        let Some(limit) = limit else { continue };
        let crossed = if add.is_zero() {
            spent >= limit
        } else {
            call > 0.0 && spent + call > limit
        };
        if crossed {
            return Some(Reached {
                which: format!("{QUOTA_PREFIX}{}.{name}", period.name()),
                limit,
                spent,
                call,
            });
        }
    }
    None
}

/// One period of a user's standing against their quota, as `GET /me/usage` answers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PeriodUsage {
    /// `day` or `month`.
    pub period: Period,
    /// The period's key, `day:2026-11-26` or `month:2026-11` (UTC).
    pub key: String,
    /// What the user spent in it, every session together.
    pub used: Used,
    /// The user's limits for the period (empty: none).
    pub limits: QuotaLimits,
    /// When the period ends and its counters start again from zero (Unix ms).
    pub resets_at: i64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// 2026-11-26T23:59:59.999Z.
    const LATE: i64 = 1_795_737_599_999;

    #[test]
    fn periods_are_utc_calendar_days_and_months() {
        assert_eq!(Period::Day.key(LATE), "day:2026-11-26");
        assert_eq!(Period::Day.key(LATE + 1), "day:2026-11-27");
        assert_eq!(Period::Day.resets_at(LATE), LATE + 1);
        assert_eq!(Period::Month.key(LATE), "month:2026-11");
        let dec31 = LATE + 35 * 86_400_000;
        assert_eq!(Period::Day.key(dec31), "day:2026-12-31");
        assert_eq!(Period::Month.key(dec31 + 1), "month:2027-01");
        assert_eq!(Period::Month.resets_at(dec31), dec31 + 1);
    }

    #[test]
    fn a_quota_file_names_the_field_and_line_at_fault() {
        let text =
            "default:\n  day: { cost_usd: 5 }\nusers:\n  alice:\n    month: { cost_usd: -1 }\n";
        let e = QuotaFile::parse(text).unwrap_err();
        assert_eq!(e[0].path, "users.alice.month.cost_usd");
        assert_eq!(e[0].line, Some(5), "{e:?}");
        let e = QuotaFile::parse("default:\n  day: { cost: 5 }\n").unwrap_err();
        let shown = e[0].in_file("quotas.yaml");
        assert!(shown.starts_with("quotas.yaml:2:"), "{shown}");
        assert!(shown.contains("cost_usd"), "{shown}");
        let f = QuotaFile::parse(
            "default: { day: { tokens: 100 } }\nusers: { bob: { runs_at_once: 2 } }\n",
        )
        .unwrap();
        assert_eq!(f.for_user("carol").unwrap().day.tokens, Some(100));
        assert_eq!(f.for_user("bob").unwrap().day.tokens, None);
    }

    /// Every limit of a quota file is a finite number, 0 or more: `.nan`, `.inf` and negatives
    /// are refused, each naming its field and line.
    #[test]
    fn a_limit_that_is_not_a_finite_number_0_or_more_is_refused() {
        for (text, field, line) in [
            (
                "default:\n  day: { cost_usd: .nan }\n",
                "default.day.cost_usd",
                2,
            ),
            (
                "default:\n  day: { cost_usd: .inf }\n",
                "default.day.cost_usd",
                2,
            ),
            (
                "users:\n  bob:\n    month: { cost_usd: -.inf }\n",
                "users.bob.month.cost_usd",
                3,
            ),
            (
                "default:\n  day: { tokens: .nan }\n",
                "default.day.tokens",
                2,
            ),
            (
                "default:\n  month: { input_tokens: .inf }\n",
                "default.month.input_tokens",
                2,
            ),
            (
                "default:\n  day: { output_tokens: -1 }\n",
                "default.day.output_tokens",
                2,
            ),
            (
                "default:\n  runs_at_once: .nan\n",
                "default.runs_at_once",
                2,
            ),
            ("default:\n  runs_at_once: -2\n", "default.runs_at_once", 2),
        ] {
            let e = QuotaFile::parse(text).unwrap_err();
            let shown = e[0].in_file("q.yaml");
            assert!(
                shown.starts_with(&format!("q.yaml:{line}:")) && shown.contains(field),
                "{text}: {shown}"
            );
        }
    }

    #[test]
    fn a_call_is_refused_when_it_could_cross_and_a_user_at_the_limit_starts_nothing() {
        let q = Quota {
            day: QuotaLimits {
                cost_usd: Some(1.0),
                tokens: Some(1000),
                ..QuotaLimits::default()
            },
            ..Quota::default()
        };
        let used = Used {
            input_tokens: 500,
            output_tokens: 100,
            cost_usd: 0.9,
            model_calls: 3,
        };
        let small = Used {
            input_tokens: 10,
            output_tokens: 10,
            cost_usd: 0.05,
            model_calls: 1,
        };
        assert_eq!(check(&q, Period::Day, &used, &small), None);
        let big = Used {
            cost_usd: 0.2,
            ..small.clone()
        };
        let r = check(&q, Period::Day, &used, &big).unwrap();
        assert_eq!(r.which, "user.day.cost_usd");
        assert_eq!(check(&q, Period::Month, &used, &big), None);
        assert_eq!(check(&q, Period::Day, &used, &Used::default()), None);
        let full = used.plus(&Used {
            cost_usd: 0.1,
            ..Used::default()
        });
        let r = check(&q, Period::Day, &full, &Used::default()).unwrap();
        assert_eq!(r.which, "user.day.cost_usd");
    }
}
