//! The general encoder of an open chunk (see the module docs of `chunk`):
//! every sample [`Chunk::push`]'s regular path does not take goes through
//! [`Enc::push_to`], which picks the value's form by its exact bit cost
//! (an exact decimal at the current exponent, the shorter of decimal and
//! XOR, or a search for a new exponent when XOR is long) and writes it.
//! Split from `chunk.rs` by concern: the regular path and the packed state
//! stay there, beside the chunk they edit in place.
//!
//! [`Chunk::push`]: super::Chunk::push

use super::super::bits::{Writer, bit_len, unzigzag, zigzag};
use super::codes::{
    approx, decimal, delta_cost, put_delta, put_fold_escape, put_resid, put_rice, put_rice_folded,
    rank_code, rank_of, resid_cost, rice_cost, value_of,
};
use super::{
    DEC, DEC_RESID, Enc, FOLD_AFTER, MAX_EXP, MAX_SKIP, NEW_EXP, NONE, SAME, SUM, State, XOR,
    folding, folds,
};

/// How a changed value is written.
enum Form {
    /// Mantissa delta, its Rice-coded residual against the prediction,
    /// and the value's residual.
    Decimal(i64, u64, u64),
    /// Mantissa delta and its Rice code; the value is the previous value
    /// plus the delta's decimal value, as a float sum gives it.
    Sum(i64, u64),
    Xor {
        x: u64,
        lead: u8,
        sig: u8,
        new: bool,
    },
    NewExp(u8, i64, u64, u64),
}

impl Form {
    /// The form's number (`SAME` .. `NEW_EXP`).
    fn number(&self) -> u8 {
        match self {
            Form::Decimal(_, _, 0) => DEC,
            Form::Sum(..) => SUM,
            Form::Decimal(..) => DEC_RESID,
            Form::Xor { .. } => XOR,
            Form::NewExp(..) => NEW_EXP,
        }
    }

    fn cost(&self, st: &State) -> u32 {
        let rank = |f| rank_code(rank_of(f, st.last)).1;
        match self {
            Form::Sum(_, z) => rank(SUM) + rice_cost(*z, st.k()),
            Form::Decimal(_, z, 0) => rank(DEC) + rice_cost(*z, st.k()),
            Form::Decimal(_, z, r) => rank(DEC_RESID) + rice_cost(*z, st.k()) + 4 + bit_len(*r),
            Form::Xor { sig, new, .. } => {
                rank(XOR) + 1 + u32::from(*sig) + if *new { 12 } else { 0 }
            }
            Form::NewExp(_, _, z, r) => rank(NEW_EXP) + 3 + delta_cost(*z) + resid_cost(*r),
        }
    }
}

impl Enc {
    /// Appends one sample to `w`: the timestamp's delta-of-delta, the
    /// value's rank and form, and the state both sides keep after it.
    #[inline]
    pub(super) fn push_to(&mut self, w: &mut Writer, ts: i64, v: f64) {
        let bits = v.to_bits();
        if self.count == 0 {
            self.first_ts = ts;
            self.st = State::first(ts, bits);
            w.put(bits, 64);
            self.count = 1;
            return;
        }
        let delta = ts.wrapping_sub(self.st.ts);
        let dod = zigzag(delta.wrapping_sub(self.st.delta));
        let form = (bits != self.st.bits).then(|| self.choose(v));
        let rank = rank_of(form.as_ref().map_or(SAME, Form::number), self.st.last);
        let folded = folds(&self.st) && folding();
        let regular = dod == 0 && rank == 0;
        if regular {
            // The common sample: a regular tick, the previous value's form
            // (after a dec or sum value, its Rice code alone).
            if !folded {
                w.put(0, 1);
            }
        } else {
            if folded {
                put_fold_escape(w);
            } else {
                w.put(1, 1);
            }
            match bit_len(dod) {
                0 => w.put(0, 1),
                1..=7 => w.put((0b10 << 7) | dod, 9),
                8..=12 => w.put((0b110 << 12) | dod, 15),
                13..=20 => w.put((0b1110 << 20) | dod, 24),
                _ => {
                    w.put(0b1111, 4);
                    w.put(dod, 64);
                }
            }
            // After a regular tick rank 0 would have been the short code.
            let (code, n) = rank_code(if dod == 0 { rank - 1 } else { rank });
            w.put(code, n);
        }
        self.st.ts = ts;
        self.st.delta = delta;
        self.st.reg = if dod == 0 {
            (self.st.reg + 1).min(FOLD_AFTER)
        } else {
            0
        };
        match form {
            None => self.st.last = SAME,
            Some(f) => self.put_value(w, f, bits, folded && regular),
        }
        self.count = self.count.saturating_add(1);
    }

    /// Picks how a value that differs from the previous one is written,
    /// from cheap tests in a fixed order, stopping at the first that fits:
    /// the decimal form at the current exponent when it needs no residual
    /// (counters and rounded gauges) or the float-sum form when that gives
    /// the value (sums of rounded increments, preferred while it is the
    /// previous form), else the shorter of the decimal form with its
    /// residual and XOR, and only then (when XOR is long) a search for a
    /// new exponent, skipped for a while after searches that failed.
    fn choose(&mut self, v: f64) -> Form {
        let st = self.st;
        let bits = v.to_bits();
        let dec = (st.exp != NONE)
            .then(|| decimal(v, st.exp))
            .flatten()
            .and_then(|(m, r)| {
                let d = m.checked_sub(st.mant)?;
                Some((d, zigzag(d.wrapping_sub(st.pred)), r))
            });
        if let Some((d, z, r)) = dec {
            if r == 0 && st.last != SUM {
                return Form::Decimal(d, z, 0);
            }
            if (f64::from_bits(st.bits) + value_of(d, st.exp)).to_bits() == bits {
                return Form::Sum(d, z);
            }
            if r == 0 {
                return Form::Decimal(d, z, 0);
            }
        }
        let xor = self.xor_form(bits);
        let best = match dec {
            Some((d, z, r)) if Form::Decimal(d, z, r).cost(&st) <= xor.cost(&st) => {
                Form::Decimal(d, z, r)
            }
            _ => xor,
        };
        if matches!(best, Form::Xor { sig, .. } if sig > 12) {
            self.search_exp(v, best)
        } else {
            best
        }
    }

    /// Writes the body of form `f` for a value of bits `bits` and moves
    /// the state on; `fold`: its Rice code is the folded one (a regular
    /// tick after a value of the same dec or sum form).
    fn put_value(&mut self, w: &mut Writer, f: Form, bits: u64, fold: bool) {
        self.st.last = f.number();
        match f {
            Form::Decimal(d, z, r) => {
                if fold {
                    put_rice_folded(w, z, self.st.k());
                } else {
                    put_rice(w, z, self.st.k());
                }
                if r != 0 {
                    let n = bit_len(r);
                    w.put(u64::from(n), 4);
                    w.put(r, n);
                }
                self.st.mant = self.st.mant.wrapping_add(d);
                self.st.adapt(d, z);
            }
            Form::Sum(d, z) => {
                if fold {
                    put_rice_folded(w, z, self.st.k());
                } else {
                    put_rice(w, z, self.st.k());
                }
                self.st.mant = self.st.mant.wrapping_add(d);
                self.st.adapt(d, z);
            }
            Form::Xor { x, lead, sig, new } => {
                if new {
                    w.put(1, 1);
                    w.put(u64::from(lead), 6);
                    w.put(u64::from(sig - 1), 6);
                    self.st.lead = lead;
                    self.st.sig = sig;
                } else {
                    w.put(0, 1);
                }
                w.put(x >> (64 - lead - sig), u32::from(sig));
                self.st.exp = NONE;
            }
            Form::NewExp(e, m, z, r) => {
                w.put(u64::from(e), 3);
                put_delta(w, z);
                put_resid(w, r);
                self.st.last = if r == 0 { DEC } else { DEC_RESID };
                self.st.exp = e;
                self.st.mant = m;
                self.st.restart(unzigzag(z));
            }
        }
        self.st.bits = bits;
    }

    /// The XOR form of `bits`: inside the previous window when it fits.
    fn xor_form(&self, bits: u64) -> Form {
        let st = &self.st;
        let x = bits ^ st.bits;
        let (lead, trail) = (x.leading_zeros() as u8, x.trailing_zeros() as u8);
        if st.lead != NONE && lead >= st.lead && trail >= 64 - st.lead - st.sig {
            Form::Xor {
                x,
                lead: st.lead,
                sig: st.sig,
                new: false,
            }
        } else {
            Form::Xor {
                x,
                lead,
                sig: 64 - lead - trail,
                new: true,
            }
        }
    }

    /// `best`, or a decimal form at a new exponent when one is shorter
    /// (for an integral value, also when its delta is no wider than XOR's
    /// window, as later samples then cost no more). Integral
    /// values try exponent 0 alone (the only one that can be
    /// shorter); after a search that finds
    /// nothing, the next ones wait 1, 3, 7 .. [`MAX_SKIP`] changed values.
    fn search_exp(&mut self, v: f64, best: Form) -> Form {
        if self.skip > 0 {
            self.skip -= 1;
            return best;
        }
        let prev = f64::from_bits(self.st.bits);
        let integral = v.fract() == 0.0;
        let exps = if integral { 0..=0 } else { 0..=MAX_EXP };
        let found = exps.into_iter().find_map(|e| {
            let (m, r) = decimal(v, e)?;
            let d = m.checked_sub(approx(prev, e)?)?;
            Some(Form::NewExp(e, m, zigzag(d), r))
        });
        // An integral value at exponent 0 is exact, and each later change
        // then costs about the bits of its delta (less, as a Rice code
        // around the running mean), where XOR costs its window, from the
        // highest changed bit down to the lowest: when the delta is no
        // wider than the window, switch even though this one sample costs
        // a few bits more (a byte counter's noisy ~2^24 steps stayed in
        // XOR for whole chunks, ~20 % of them, each sample through the
        // slow decoder). The 3 bits of slack: the zigzag's sign bit, a
        // chance low zero bit in XOR's window, and what the running mean
        // takes off a counter's steps. Values with many low zero bits
        // (page multiples) keep XOR, whose window leaves those out.
        let steps_no_wider = |f: &Form| match (f, &best) {
            (Form::NewExp(_, _, z, _), Form::Xor { sig, .. }) => {
                integral && bit_len(*z) <= u32::from(*sig) + 3
            }
            _ => false,
        };
        match found {
            Some(f) if steps_no_wider(&f) || f.cost(&self.st) < best.cost(&self.st) => {
                self.backoff = 0;
                f
            }
            _ => {
                self.backoff = (self.backoff * 2 + 1).min(MAX_SKIP);
                self.skip = self.backoff;
                best
            }
        }
    }
}
