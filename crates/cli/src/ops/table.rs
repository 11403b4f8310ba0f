//! Plain-text tables for people: each column as wide as its widest cell, two
//! spaces apart, the last column unpadded.

use std::fmt::Write;

/// The widths of a table's columns.
pub struct Columns(Vec<usize>);

impl Columns {
    /// Columns wide enough for `header` and every row.
    pub fn fit<R: AsRef<[String]>>(header: &[&str], rows: &[R]) -> Self {
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
                *w = (*w).max(cell.chars().count());
            }
        }
        Self(widths)
    }

    /// One line of `cells`, padded to the columns.
    pub fn line(&self, out: &mut String, cells: &[&str]) {
        let last = cells.len().saturating_sub(1);
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                let _ = writeln!(out, "{cell}");
            } else {
                let w = self.0.get(i).copied().unwrap_or(0);
                let _ = write!(out, "{cell:<w$}  ");
            }
        }
    }

    /// One row of owned cells.
    pub fn row(&self, out: &mut String, row: &[String]) {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        self.line(out, &cells);
    }
}
