"""Recurring schedules: declared, synced into their table, and run when due."""
