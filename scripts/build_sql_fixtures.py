"""Build the bundled text-to-SQL fixtures: three small SQLite databases and mini Spider/BIRD-layout sets.

Outputs (all under mrtpo_openrlhf/data/sql/, committed to git; rerun this script to rebuild them):
    database/<db_id>/<db_id>.sqlite          Spider layout databases (bookstore, school, flights)
    train.json, dev.json, tables.json         mini Spider-layout set
    bird/train.json, bird/dev.json, bird/dev_tables.json, bird/dev_databases/<db_id>/<db_id>.sqlite (copies)
    train_mini.jsonl, dev_mini.jsonl          converted training/eval rows (labels resolve via the bundled root)

The data is designed to exercise the scorer: NULLs, duplicate rows, ties broken by ORDER BY, unicode strings.
Every gold query is executed through the sandbox and must return at least one row.

    python scripts/build_sql_fixtures.py
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

from mrtpo_openrlhf.data.jsonl import write_jsonl
from mrtpo_openrlhf.tasks.sql.reward import FIXTURE_DIR, convert_examples
from mrtpo_openrlhf.tasks.sql.verifier import execute_sql

DATABASES: dict[str, dict] = {
    "bookstore": {
        "ddl": [
            "CREATE TABLE authors (author_id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT)",
            "CREATE TABLE books (book_id INTEGER PRIMARY KEY, title TEXT NOT NULL, "
            "author_id INTEGER REFERENCES authors(author_id), year INTEGER, price REAL, genre TEXT)",
            "CREATE TABLE sales (sale_id INTEGER PRIMARY KEY, book_id INTEGER REFERENCES books(book_id), "
            "store TEXT, quantity INTEGER, sale_date TEXT)",
        ],
        "rows": {
            "authors": [
                (1, "Gabriel García Márquez", "Colombia"),
                (2, "Haruki Murakami (村上春樹)", "Japan"),
                (3, "Jane Austen", "UK"),
                (4, "Chinua Achebe", "Nigeria"),
                (5, "Anonymous", None),
                (6, "Toni Morrison", "USA"),
            ],
            "books": [
                (1, "Cien años de soledad", 1, 1967, 12.5, "novel"),
                (2, "Norwegian Wood", 2, 1987, 9.99, "novel"),
                (3, "Kafka on the Shore", 2, 2002, 11.0, "novel"),
                (4, "Pride and Prejudice", 3, 1813, 7.5, "romance"),
                (5, "Emma", 3, 1815, 7.5, "romance"),
                (6, "Things Fall Apart", 4, 1958, 8.25, "novel"),
                (7, "Beowulf", 5, 1000, 5.0, None),
                (8, "Beloved", 6, 1987, 10.0, None),
                (9, "1Q84", 2, 2009, 15.0, "novel"),
            ],
            "sales": [  # sales 2/3 and 5/11 are duplicate rows apart from the id
                (1, 1, "Lisbon", 2, "2024-01-03"),
                (2, 2, "Tokyo", 5, "2024-01-05"),
                (3, 2, "Tokyo", 5, "2024-01-05"),
                (4, 3, "Tokyo", 1, "2024-02-10"),
                (5, 4, "London", 3, "2024-02-11"),
                (6, 5, "London", 1, "2024-03-01"),
                (7, 6, "Lagos", 4, "2024-03-02"),
                (8, 8, "New York", 2, "2024-03-15"),
                (9, 9, "Tokyo", 7, "2024-04-01"),
                (10, 1, "Bogotá", 6, "2024-04-02"),
                (11, 4, "London", 3, "2024-02-11"),
                (12, 9, "Tokyo", None, "2024-04-03"),
            ],
        },
    },
    "school": {
        "ddl": [
            "CREATE TABLE classes (class_id INTEGER PRIMARY KEY, name TEXT NOT NULL, teacher TEXT)",
            "CREATE TABLE students (student_id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "class_id INTEGER REFERENCES classes(class_id), birth_year INTEGER, city TEXT)",
            "CREATE TABLE exam_scores (student_id INTEGER REFERENCES students(student_id), "
            "subject TEXT, score INTEGER)",
        ],
        "rows": {
            "classes": [(1, "7A", "Ms. Okafor"), (2, "7B", "Mr. Müller"), (3, "8A", None)],
            "students": [  # two students are called Ana
                (1, "Ana", 1, 2011, "Porto"),
                (2, "Ben", 1, 2011, "Leeds"),
                (3, "Chloé", 2, 2012, "Lyon"),
                (4, "Dmitri", 2, 2011, None),
                (5, "Eun-ji", 3, 2010, "Busan"),
                (6, "Femi", 3, 2010, "Lagos"),
                (7, "Ana", 2, 2012, "Porto"),
            ],
            "exam_scores": [
                (1, "math", 90),
                (1, "art", 75),
                (2, "math", 85),
                (2, "art", None),
                (3, "math", 90),
                (3, "art", 88),
                (4, "math", 70),
                (5, "math", 95),
                (5, "art", 60),
                (6, "math", 85),
                (7, "math", None),
            ],
        },
    },
    "flights": {
        "ddl": [
            "CREATE TABLE airports (code TEXT PRIMARY KEY, city TEXT NOT NULL, country TEXT)",
            "CREATE TABLE flights (flight_id INTEGER PRIMARY KEY, origin TEXT REFERENCES airports(code), "
            "destination TEXT REFERENCES airports(code), departure TEXT, duration_min INTEGER, "
            "price REAL, airline TEXT)",
        ],
        "rows": {
            "airports": [
                ("LIS", "Lisbon", "Portugal"),
                ("MAD", "Madrid", "Spain"),
                ("CDG", "Paris", "France"),
                ("NRT", "Tokyo", "Japan"),
                ("JFK", "New York", "USA"),
                ("ZRH", "Zürich", "Switzerland"),
                ("ICN", "Seoul", "South Korea"),
            ],
            "flights": [
                (1, "LIS", "MAD", "2024-05-01 07:00", 75, 89.0, "Iberia"),
                (2, "MAD", "LIS", "2024-05-01 09:30", 80, 95.0, "Iberia"),
                (3, "LIS", "CDG", "2024-05-01 11:00", 150, 120.0, "TAP"),
                (4, "CDG", "NRT", "2024-05-02 13:00", 760, 880.0, "Air France"),
                (5, "JFK", "LIS", "2024-05-02 18:00", 400, 450.0, "TAP"),
                (6, "ZRH", "CDG", "2024-05-03 06:45", 70, 130.0, "Swiss"),
                (7, "CDG", "ZRH", "2024-05-03 20:15", 75, 130.0, "Swiss"),
                (8, "LIS", "JFK", "2024-05-04 10:00", 480, 510.0, "TAP"),
                (9, "MAD", "CDG", "2024-05-04 12:00", 125, None, "Iberia"),
                (10, "NRT", "JFK", "2024-05-05 17:00", 760, 990.0, "ANA"),
            ],
        },
    },
}

# (db_id, question, gold SQL)
SPIDER_TRAIN = [
    ("bookstore", "How many books are there?", "SELECT count(*) FROM books"),
    ("bookstore", "List the titles of books published in 1987.", "SELECT title FROM books WHERE year = 1987"),
    (
        "bookstore",
        "What are the names of authors whose country is unknown?",
        "SELECT name FROM authors WHERE country IS NULL",
    ),
    (
        "bookstore",
        "List the titles and prices of all books from the most to the least expensive, ties by title.",
        "SELECT title, price FROM books ORDER BY price DESC, title",
    ),
    (
        "bookstore",
        "Which different genres do the books have?",
        "SELECT DISTINCT genre FROM books WHERE genre IS NOT NULL",
    ),
    (
        "bookstore",
        "What is the total quantity sold by each store?",
        "SELECT store, sum(quantity) FROM sales GROUP BY store",
    ),
    (
        "school",
        "What are the names of the students in class 7A?",
        "SELECT T1.name FROM students AS T1 JOIN classes AS T2 ON T1.class_id = T2.class_id WHERE T2.name = '7A'",
    ),
    ("school", "What is the average math score?", "SELECT avg(score) FROM exam_scores WHERE subject = 'math'"),
    (
        "school",
        "What are the names of the students with the highest math score?",
        "SELECT T1.name FROM students AS T1 JOIN exam_scores AS T2 ON T1.student_id = T2.student_id "
        "WHERE T2.subject = 'math' AND T2.score = (SELECT max(score) FROM exam_scores WHERE subject = 'math')",
    ),
    ("school", "How many students live in each city?", "SELECT city, count(*) FROM students GROUP BY city"),
    (
        "flights",
        "List the ids of the flights leaving Lisbon, by departure time.",
        "SELECT T1.flight_id FROM flights AS T1 JOIN airports AS T2 ON T1.origin = T2.code "
        "WHERE T2.city = 'Lisbon' ORDER BY T1.departure",
    ),
    ("flights", "What is the longest flight duration in minutes?", "SELECT max(duration_min) FROM flights"),
    (
        "flights",
        "Which airlines operate more than one flight?",
        "SELECT airline FROM flights GROUP BY airline HAVING count(*) > 1",
    ),
]
SPIDER_DEV = [
    (
        "bookstore",
        "Who wrote Norwegian Wood?",
        "SELECT T2.name FROM books AS T1 JOIN authors AS T2 ON T1.author_id = T2.author_id "
        "WHERE T1.title = 'Norwegian Wood'",
    ),
    (
        "school",
        "Name the three students with the best math scores, best first, ties by name.",
        "SELECT T1.name FROM students AS T1 JOIN exam_scores AS T2 ON T1.student_id = T2.student_id "
        "WHERE T2.subject = 'math' ORDER BY T2.score DESC, T1.name LIMIT 3",
    ),
    ("flights", "How many flights have no price?", "SELECT count(*) FROM flights WHERE price IS NULL"),
    (
        "flights",
        "Which cities can be reached directly from Paris?",
        "SELECT T3.city FROM flights AS T1 JOIN airports AS T2 ON T1.origin = T2.code "
        "JOIN airports AS T3 ON T1.destination = T3.code WHERE T2.city = 'Paris'",
    ),
    (
        "school",
        "Who teaches the class with the most students?",
        "SELECT T2.teacher FROM students AS T1 JOIN classes AS T2 ON T1.class_id = T2.class_id "
        "GROUP BY T1.class_id ORDER BY count(*) DESC LIMIT 1",
    ),
]
# (db_id, question, evidence, gold SQL, difficulty)
BIRD_TRAIN = [
    (
        "bookstore",
        "What is the total revenue of Norwegian Wood?",
        "revenue = SUM(quantity * price)",
        "SELECT SUM(T2.quantity * T1.price) FROM books AS T1 INNER JOIN sales AS T2 ON T1.book_id = T2.book_id "
        "WHERE T1.title = 'Norwegian Wood'",
        "simple",
    ),
    (
        "bookstore",
        "How many copies of books by Haruki Murakami were sold in Tokyo?",
        "Haruki Murakami refers to name = 'Haruki Murakami (村上春樹)'",
        "SELECT SUM(T3.quantity) FROM authors AS T1 INNER JOIN books AS T2 ON T1.author_id = T2.author_id "
        "INNER JOIN sales AS T3 ON T2.book_id = T3.book_id "
        "WHERE T1.name = 'Haruki Murakami (村上春樹)' AND T3.store = 'Tokyo'",
        "moderate",
    ),
    (
        "school",
        "What percentage of the math exams have a score of at least 85?",
        "percentage = DIVIDE(COUNT(score >= 85), COUNT(score)) * 100; math exams refer to subject = 'math'",
        "SELECT CAST(SUM(CASE WHEN score >= 85 THEN 1 ELSE 0 END) AS REAL) * 100 / COUNT(score) "
        "FROM exam_scores WHERE subject = 'math'",
        "challenging",
    ),
    (
        "school",
        "List the names of the students born in 2011 who live in Porto.",
        "born in 2011 refers to birth_year = 2011",
        "SELECT name FROM students WHERE birth_year = 2011 AND city = 'Porto'",
        "simple",
    ),
    (
        "flights",
        "What is the average price of TAP flights?",
        "TAP refers to airline = 'TAP'",
        "SELECT AVG(price) FROM flights WHERE airline = 'TAP'",
        "simple",
    ),
    (
        "flights",
        "Which country is the destination of the most expensive flight?",
        "most expensive refers to MAX(price)",
        "SELECT T2.country FROM flights AS T1 INNER JOIN airports AS T2 ON T1.destination = T2.code "
        "ORDER BY T1.price DESC LIMIT 1",
        "moderate",
    ),
    (
        "bookstore",
        "Which stores sold the book Cien años de soledad?",
        "",
        "SELECT DISTINCT T2.store FROM books AS T1 INNER JOIN sales AS T2 ON T1.book_id = T2.book_id "
        "WHERE T1.title = 'Cien años de soledad'",
        "simple",
    ),
    (
        "school",
        "Among the students of class 7B, how many have no math score?",
        "no math score refers to subject = 'math' AND score IS NULL; class 7B refers to classes.name = '7B'",
        "SELECT COUNT(*) FROM students AS T1 INNER JOIN classes AS T2 ON T1.class_id = T2.class_id "
        "INNER JOIN exam_scores AS T3 ON T1.student_id = T3.student_id "
        "WHERE T2.name = '7B' AND T3.subject = 'math' AND T3.score IS NULL",
        "moderate",
    ),
]
BIRD_DEV = [
    (
        "flights",
        "How many flights depart on 2024-05-01?",
        "depart on 2024-05-01 refers to departure LIKE '2024-05-01%'",
        "SELECT COUNT(*) FROM flights WHERE departure LIKE '2024-05-01%'",
        "simple",
    ),
    (
        "bookstore",
        "List the titles of the books with no genre.",
        "no genre refers to genre IS NULL",
        "SELECT title FROM books WHERE genre IS NULL",
        "simple",
    ),
    (
        "school",
        "What is the highest art score and who got it?",
        "highest refers to MAX(score); art refers to subject = 'art'",
        "SELECT T1.name, MAX(T2.score) FROM students AS T1 INNER JOIN exam_scores AS T2 "
        "ON T1.student_id = T2.student_id WHERE T2.subject = 'art'",
        "moderate",
    ),
    (
        "flights",
        "List the cities of the airports with no departing flight.",
        "",
        "SELECT city FROM airports WHERE code NOT IN (SELECT origin FROM flights)",
        "moderate",
    ),
    (
        "bookstore",
        "How many different authors sold at least one book in London?",
        "",
        "SELECT COUNT(DISTINCT T1.author_id) FROM books AS T1 INNER JOIN sales AS T2 ON T1.book_id = T2.book_id "
        "WHERE T2.store = 'London'",
        "challenging",
    ),
]


def build_database(path: Path, spec: dict) -> None:
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    try:
        for stmt in spec["ddl"]:
            conn.execute(stmt)
        for table, rows in spec["rows"].items():
            conn.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(rows[0]))})", rows)
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()


def tables_entry(db_id: str, path: Path) -> dict:
    """One tables.json entry in the Spider format, read from the built database."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY rowid")]
        columns, types, pks, fk_refs = [[-1, "*"]], ["text"], [], []
        for t_index, table in enumerate(tables):
            for cid, name, ctype, _notnull, _default, pk in conn.execute(f"PRAGMA table_info({table})"):
                columns.append([t_index, name])
                types.append("number" if ctype.upper() in ("INTEGER", "REAL") else "text")
                if pk:
                    pks.append(len(columns) - 1)
            for row in conn.execute(f"PRAGMA foreign_key_list({table})"):
                fk_refs.append((table, row[3], row[2], row[4]))  # (table, from col, ref table, ref col)
    finally:
        conn.close()
    index = {(tables[t], c): i for i, (t, c) in enumerate(columns) if t >= 0}
    fks = [[index[(t, c)], index[(rt, rc)]] for t, c, rt, rc in fk_refs]
    return {
        "db_id": db_id,
        "table_names_original": tables,
        "table_names": [t.replace("_", " ") for t in tables],
        "column_names_original": columns,
        "column_names": [[t, c.replace("_", " ")] for t, c in columns],
        "column_types": types,
        "primary_keys": pks,
        "foreign_keys": fks,
    }


def check_gold(db_root: Path, db_id: str, sql: str) -> None:
    res = execute_sql(db_root / db_id / f"{db_id}.sqlite", sql)
    if not res.ok or not res.rows:
        raise SystemExit(f"gold query fails or returns nothing on {db_id}: {sql}\n  {res.error}")
    print(f"  [{db_id}] {sql[:70]:<70} -> {res.rows[:3]}{' ...' if len(res.rows) > 3 else ''}")


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main() -> int:
    out = FIXTURE_DIR
    db_root = out / "database"
    bird_dir = out / "bird"
    for db_id, spec in DATABASES.items():
        build_database(db_root / db_id / f"{db_id}.sqlite", spec)
    write_json(out / "tables.json", [tables_entry(d, db_root / d / f"{d}.sqlite") for d in DATABASES])

    spider = {
        split: [{"db_id": d, "question": q, "query": sql} for d, q, sql in items]
        for split, items in (("train", SPIDER_TRAIN), ("dev", SPIDER_DEV))
    }
    bird = {
        split: [
            {"question_id": i, "db_id": d, "question": q, "evidence": e, "SQL": sql, "difficulty": diff}
            for i, (d, q, e, sql, diff) in enumerate(items)
        ]
        for split, items in (("train", BIRD_TRAIN), ("dev", BIRD_DEV))
    }
    print("checking gold queries:")
    for items in (*spider.values(), *bird.values()):
        for ex in items:
            check_gold(db_root, ex["db_id"], ex.get("query") or ex["SQL"])
    for split, items in spider.items():
        write_json(out / f"{split}.json", items)
    for split, items in bird.items():
        write_json(bird_dir / f"{split}.json", items)
    write_json(bird_dir / "dev_tables.json", json.loads((out / "tables.json").read_text(encoding="utf-8")))
    for db_id in DATABASES:  # BIRD layout copies (identical bytes, so git stores one blob)
        target = bird_dir / "dev_databases" / db_id / f"{db_id}.sqlite"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(db_root / db_id / f"{db_id}.sqlite", target)

    for split in ("train", "dev"):
        rows = convert_examples(spider[split], "spider", db_root, source=f"{split}.json", db_root_in_label=False)
        rows += convert_examples(
            bird[split], "bird", bird_dir / "dev_databases", source=f"bird/{split}.json", db_root_in_label=False
        )
        n = write_jsonl(out / f"{split}_mini.jsonl", rows)
        longest = max(len(r["prompt"]) for r in rows)
        print(f"wrote {n} rows to {out / f'{split}_mini.jsonl'} (longest prompt {longest} chars)")
    # The CPU demo's training set: the same rows with a worked example of the layout (SmolLM2-135M needs it).
    rows = convert_examples(
        spider["train"], "spider", db_root, source="train.json", db_root_in_label=False, one_shot=True
    )
    rows += convert_examples(
        bird["train"],
        "bird",
        bird_dir / "dev_databases",
        source="bird/train.json",
        db_root_in_label=False,
        one_shot=True,
    )
    n = write_jsonl(out / "train_mini_oneshot.jsonl", rows)
    print(f"wrote {n} rows to {out / 'train_mini_oneshot.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
