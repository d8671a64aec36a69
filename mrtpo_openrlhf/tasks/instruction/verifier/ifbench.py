"""The 58 IFBench instructions, with the semantics of allenai/IFBench main (``ifbench/instructions.py`` and
``instructions_util.py`` at commit db69a6f, 2026-08-19; docs/eval.md lists which change each checker follows).

Sentences are ``nltk.sent_tokenize`` (punkt, offline through ``text.punkt_sentences``), words of the word-level
checkers ``nltk.word_tokenize``. ``ratio:stop_words`` reads NLTK's English stopword list, shipped as package data
(``data/instructions/nltk_stopwords_english.txt``). ``words:start_verb`` needs NLTK's averaged-perceptron POS
tagger, which no installable package ships: it raises UnsupportedInstruction unless that NLTK data is installed.
Where the official code would crash on odd input, the checker returns False instead.
"""

from __future__ import annotations

import csv
import io
import re
import string
import unicodedata
from collections import Counter
from functools import lru_cache

from mrtpo_openrlhf.paths import DATA_DIR

from .base import Checker, register
from .text import (
    PUNCT,
    PUNCT_SPACE,
    count_words,
    nltk_resource_missing,
    punkt_sentences,
    strip_punctuation,
    word_tokenize,
)

split_into_sentences = punkt_sentences  # allenai/IFBench main: instructions_util.split_into_sentences = sent_tokenize
STOPWORDS_FILE = DATA_DIR / "instructions" / "nltk_stopwords_english.txt"

PERSON_NAMES = (
    "Emma",
    "Liam",
    "Sophia",
    "Jackson",
    "Olivia",
    "Noah",
    "Ava",
    "Lucas",
    "Isabella",
    "Mason",
    "Mia",
    "Ethan",
    "Charlotte",
    "Alexander",
    "Amelia",
    "Benjamin",
    "Harper",
    "Leo",
    "Zoe",
    "Daniel",
    "Chloe",
    "Samuel",
    "Lily",
    "Matthew",
    "Grace",
    "Owen",
    "Abigail",
    "Gabriel",
    "Ella",
    "Jacob",
    "Scarlett",
    "Nathan",
    "Victoria",
    "Elijah",
    "Layla",
    "Nicholas",
    "Audrey",
    "David",
    "Hannah",
    "Christopher",
    "Penelope",
    "Thomas",
    "Nora",
    "Andrew",
    "Aria",
    "Joseph",
    "Claire",
    "Ryan",
    "Stella",
    "Jonathan",
)
CONJUNCTIONS = frozenset({"and", "but", "for", "nor", "or", "so", "yet"})
PRONOUNS = frozenset(
    (  # personal, possessive, reflexive, demonstrative, interrogative, relative, indefinite
        "i me we us you he him she her it they them "
        "my mine our ours your yours his hers its their theirs "
        "myself ourselves yourself yourselves himself herself itself themselves "
        "this that these those who whom whose which what whoever whomever whatever whichever "
        "anybody anyone anything everybody everyone everything nobody nothing somebody someone something "
        "each either neither both all some any none"
    ).split()
)
EUROPEAN_CAPITALS_BY_LATITUDE = (
    "Reykjavik",
    "Helsinki",
    "Oslo",
    "Tallinn",
    "Stockholm",
    "Riga",
    "Moscow",
    "Copenhagen",
    "Vilnius",
    "Minsk",
    "Dublin",
    "Berlin",
    "Amsterdam",
    "Warsaw",
    "London",
    "Brussels",
    "Prague",
    "Luxembourg",
    "Paris",
    "Vienna",
    "Bratislava",
    "Budapest",
    "Vaduz",
    "Chisinau",
    "Bern",
    "Ljubljana",
    "Zagreb",
)
_JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")


def _ascii_fold(text: str) -> str:
    """'São Tomé' -> 'Sao Tome': decompose, drop what is not ASCII."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def _ordinal_suffix(n: int) -> str:
    return {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


class _Fixed(Checker):
    """A checker without kwargs whose description is the class attribute ``TEXT``."""

    TEXT = ""

    def __init__(self, **_ignored):  # official build_description(**kwargs) ignores extra keys
        pass

    def description(self) -> str:
        return self.TEXT


# --- count ---------------------------------------------------------------------------------------
@register("count:word_count_range")
class WordCountRange(Checker):
    def __init__(self, *, min_words: int, max_words: int):
        self.min_words, self.max_words = int(min_words), int(max_words)

    def description(self) -> str:
        return f"The response must contain between {self.min_words} and {self.max_words} words."

    def check(self, response: str) -> bool:
        return self.min_words <= count_words(response) <= self.max_words


@register("count:unique_word_count")
class UniqueWordCount(Checker):
    def __init__(self, *, N: int):
        self.n = int(N)

    def description(self) -> str:
        return f"Use at least {self.n} unique words in the response."

    def check(self, response: str) -> bool:
        return len({w.strip(PUNCT_SPACE) for w in response.lower().split()}) >= self.n


@register("count:conjunctions")
class Conjunctions(Checker):
    def __init__(self, *, small_n: int):
        self.n = int(small_n)

    def description(self) -> str:
        return f"Use at least {self.n} different coordinating conjunctions in the response."

    def check(self, response: str) -> bool:
        # official quirk kept: distinct raw tokens, so "and" and "and," count as two
        found = {w for w in response.split() if w.strip(PUNCT_SPACE).lower() in CONJUNCTIONS}
        return len(found) >= self.n


@register("count:person_names")
class PersonNames(Checker):
    def __init__(self, *, N: int):
        self.n = int(N)

    def description(self) -> str:
        return (
            f"Mention at least {self.n} different person names in the response, from this list of person names: "
            + ", ".join(PERSON_NAMES)
            + " ."
        )

    def check(self, response: str) -> bool:
        return sum(1 for name in PERSON_NAMES if re.search(rf"\b{re.escape(name)}\b", response)) >= self.n


@register("count:numbers")
class Numbers(Checker):
    def __init__(self, *, N: int):
        self.n = int(N)

    def description(self) -> str:
        return f"Include exactly {self.n} numbers in the response."

    def check(self, response: str) -> bool:
        # punctuation is removed first so 3.14 and 1,000 count as one number each
        return len(re.findall(r"\d+", strip_punctuation(response))) == self.n


@register("count:punctuation")
class PunctuationCover(_Fixed):
    TEXT = "Use every standard punctuation mark at least once, including semicolons, colons, and the interrobang (?!)."

    def check(self, response: str) -> bool:
        if not ("!?" in response or "?!" in response or "\u203d" in response):
            return False
        rest = response.replace("?!", "", 1)
        if len(rest) == len(response):
            rest = response.replace("!?", "", 1)
        return set(".,!?;:") <= set(rest)


@register("count:pronouns")
class Pronouns(Checker):
    def __init__(self, *, N: int):
        self.n = int(N)

    def description(self) -> str:
        return f"The response should include at least {self.n} pronouns."

    def check(self, response: str) -> bool:
        words = word_tokenize(response.lower().replace("/", " "))  # "she/her" counts as two
        return sum(1 for w in words if w in PRONOUNS) >= self.n


@register("count:words_japanese")
class WordsJapanese(Checker):
    def __init__(self, *, N: int):
        self.n = int(N)
        if self.n < 1:
            raise ValueError(f"{self.instruction_id}: N must be >= 1, got {self.n}")

    def description(self) -> str:
        # official wording, including its dropped "word" for 1st/2nd/3rd
        if self.n % 10 in (1, 2, 3):
            return f"Every {self.n}{_ordinal_suffix(self.n)} of your response must be in Japanese."
        return f"Every {self.n}th word of your response must be in Japanese."

    def check(self, response: str) -> bool:
        for i, word in enumerate(response.split(), 1):
            word = word.strip(PUNCT_SPACE)
            if i % self.n == 0 and word and not word.isdigit() and not _JAPANESE.search(word):
                return False
        return True


@register("count:keywords_multiple")
class KeywordsMultiple(Checker):
    COUNTS = (1, 2, 3, 5, 7)
    WORDS = ("once", "twice", "three times", "five times", "seven times")

    def __init__(self, *, keyword1: str, keyword2: str, keyword3: str, keyword4: str, keyword5: str):
        self.keywords = tuple(k.strip() for k in (keyword1, keyword2, keyword3, keyword4, keyword5))

    def description(self) -> str:
        parts = [f"keyword {k} {w} in your response" for k, w in zip(self.keywords, self.WORDS)]
        return "Include " + ", ".join(parts[:4]) + ", and " + parts[4] + "."

    def check(self, response: str) -> bool:
        low = response.lower()
        return all(low.count(k.lower()) == c for k, c in zip(self.keywords, self.COUNTS))


# --- ratio ----------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def english_stopwords() -> frozenset[str]:
    """NLTK's English stopword list (``stopwords.words('english')``, 198 words), shipped as package data."""
    return frozenset(w for w in STOPWORDS_FILE.read_text(encoding="utf-8").split("\n") if w)


@register("ratio:stop_words")
class StopWords(Checker):
    def __init__(self, *, percentage: int):
        self.percentage = int(percentage)

    def description(self) -> str:
        return f"Ensure that stop words constitute no more than {self.percentage}% of the total words in your response."

    def check(self, response: str) -> bool:
        words = re.findall(r"\w+", response)
        if not words:
            return False
        stop = english_stopwords()
        # the official operation order: (14 / 100) * 100 = 14.000000000000002 > 14
        return sum(1 for w in words if w.lower() in stop) / len(words) * 100 <= self.percentage


def _sentence_end_counts(response: str) -> Counter:
    return Counter(s[-1] for s in split_into_sentences(response) if s and s[-1] in ".?!")


@register("ratio:sentence_type")
class SentenceType(_Fixed):
    TEXT = "Maintain a 2:1 ratio of declarative to interrogative sentences."

    def check(self, response: str) -> bool:
        ends = _sentence_end_counts(response)
        return ends["."] == 2 * ends["?"]


@register("ratio:sentence_balance")
class SentenceBalance(_Fixed):
    TEXT = "Ensure that the ratio of sentence types (declarative, interrogative, exclamatory) is balanced."

    def check(self, response: str) -> bool:
        ends = _sentence_end_counts(response)
        return ends["."] == ends["?"] == ends["!"]


@register("ratio:overlap")
class Overlap(Checker):
    def __init__(self, *, reference_text: str, percentage: int):
        self.reference_text = reference_text
        self.percentage = int(percentage)

    def description(self) -> str:
        return f"Maintain a trigram overlap of {self.percentage}% (\u00b12%) with the provided reference text."

    @staticmethod
    def _char_trigrams(text: str) -> set[str]:
        # official quirk kept: nltk.ngrams over the string gives character trigrams
        return {text[i : i + 3] for i in range(len(text) - 2)}

    def check(self, response: str) -> bool:
        mine = self._char_trigrams(response)
        if not mine:
            return False
        overlap = len(mine & self._char_trigrams(self.reference_text)) / len(mine) * 100  # official order
        return self.percentage - 2 <= overlap <= self.percentage + 2


@register("ratio:sentence_words")
class SentenceWords(_Fixed):
    TEXT = "Respond with three sentences, all containing the same number of characters but using all different words."

    def check(self, response: str) -> bool:
        # official: only the character counts are checked, not the distinct words
        sentences = split_into_sentences(response)
        return len(sentences) == 3 and len({len(s.strip()) for s in sentences}) == 1


# --- words ----------------------------------------------------------------------------------------
@register("words:alphabet")
class AlphabetLoop(_Fixed):
    TEXT = "Each word must start with the next letter of the alphabet, looping back to 'A' after 'Z'."

    def check(self, response: str) -> bool:
        words = strip_punctuation(response).split()
        if not words:
            return False
        letter = words[0][0].lower()
        if letter not in string.ascii_lowercase:
            return False
        for word in words[1:]:
            letter = chr((ord(letter) - 97 + 1) % 26 + 97)
            if word.lower()[0] != letter:
                return False
        return True


@register("words:vowel")
class ThreeVowels(_Fixed):
    TEXT = "Write a paragraph using words that contain only three types of vowels."

    def check(self, response: str) -> bool:
        lines = response.strip().split("\n")
        return len(lines) == 1 and len(set(lines[0].lower()) & set("aeiou")) <= 3


@register("words:consonants")
class ConsonantCluster(_Fixed):
    TEXT = "Ensure each word in your response has at least one consonant cluster (two or more consonants together)."
    _CLUSTER = re.compile(r"[bcdfghjklmnpqrstvwxyz]{2}")

    def check(self, response: str) -> bool:
        return all(self._CLUSTER.search(w) for w in response.lower().split())


@register("words:palindrome")
class Palindromes(_Fixed):
    TEXT = "Include at least 10 single-word palindromes, each at least 5 characters long."

    def check(self, response: str) -> bool:
        words = strip_punctuation(response).lower().split()
        return sum(1 for w in words if len(w) >= 5 and w == w[::-1]) >= 10


@register("words:prime_lengths")
class PrimeLengths(_Fixed):
    TEXT = "Use only words with lengths that are prime numbers."

    def check(self, response: str) -> bool:
        # official set of primes stops at 97
        return all(_is_prime(len(w)) and len(w) < 100 for w in strip_punctuation(response).split())


def _pos_tagger_missing() -> str | None:
    return nltk_resource_missing("taggers/averaged_perceptron_tagger_eng/")


@register("words:start_verb")
class StartVerb(_Fixed):
    TEXT = "The response must start with a verb."
    unsupported_reason = staticmethod(_pos_tagger_missing)

    def check(self, response: str) -> bool:
        self.check_supported()
        import nltk

        tokens = word_tokenize(response)
        return bool(tokens) and "VB" in nltk.pos_tag(tokens)[0][1]


@register("words:repeats")
class LimitedRepeats(Checker):
    def __init__(self, *, small_n: int):
        self.n = int(small_n)

    def description(self) -> str:
        return f"The response should not repeat any word more than {self.n} times."

    def check(self, response: str) -> bool:
        counts = Counter(strip_punctuation(response.lower()).split())
        return all(c <= self.n for c in counts.values())


@register("words:odd_even_syllables")
class OddEvenSyllables(_Fixed):
    TEXT = "Alternate between words with odd and even numbers of syllables."

    def check(self, response: str) -> bool:
        import syllapy

        parity = [syllapy.count(w) % 2 for w in strip_punctuation(response).lower().split()]
        return all(a != b for a, b in zip(parity, parity[1:]))


@register("words:last_first")
class LastFirst(_Fixed):
    TEXT = "The last word of each sentence must become the first word of the next sentence."

    def check(self, response: str) -> bool:
        sentences = split_into_sentences(response)
        for cur, nxt in zip(sentences, sentences[1:]):
            cur_words, nxt_words = cur.rstrip(PUNCT_SPACE).split(), nxt.lstrip(PUNCT_SPACE).split()
            if not cur_words or not nxt_words or cur_words[-1].lower() != nxt_words[0].lower():
                return False
        return True


@register("words:paragraph_last_first")
class ParagraphLastFirst(_Fixed):
    TEXT = "Each paragraph must end with the same word it started with, separate paragraphs with a newline."

    def check(self, response: str) -> bool:
        for line in response.split("\n"):
            line = line.strip().lower()
            if not line:
                continue
            words = line.strip(PUNCT_SPACE).split()
            if words and words[0] != words[-1]:  # a pure-punctuation line (a delimiter) is skipped
                return False
        return True


@register("words:no_consecutive")
class NoConsecutiveFirstLetter(_Fixed):
    TEXT = "No two consecutive words can share the same first letter."

    def check(self, response: str) -> bool:
        words = strip_punctuation(response.lower()).split()
        return all(a[0] != b[0] for a, b in zip(words, words[1:]))


@register("words:keywords_specific_position")
class KeywordSpecificPosition(Checker):
    def __init__(self, *, keyword: str, n: int, m: int):
        self.keyword, self.n, self.m = keyword.strip(), int(n), int(m)
        if self.n < 1 or self.m < 1:
            raise ValueError(f"{self.instruction_id}: n and m start at 1, got n={self.n} m={self.m}")

    def description(self) -> str:
        return f"Include keyword {self.keyword} in the {self.n}-th sentence, as the {self.m}-th word of that sentence."

    def check(self, response: str) -> bool:
        sentences = split_into_sentences(response)
        if len(sentences) < self.n:
            return False
        words = [t for t in word_tokenize(sentences[self.n - 1]) if any(ch.isalnum() for ch in t)]
        return len(words) >= self.m and words[self.m - 1].lower() == self.keyword.lower()


@register("words:words_position")
class WordsPosition(Checker):
    def __init__(self, *, keyword: str):
        self.keyword = keyword.strip()

    def description(self) -> str:
        return (
            "The second word in your response and the second to last word in your response should be the word "
            f"{self.keyword}."
        )

    def check(self, response: str) -> bool:
        words = word_tokenize(response)
        if len(words) < 2:
            return False
        key = self.keyword.lower()
        if words[-1] in string.punctuation:  # official substring test: "." and "()" are punctuation, "..." is not
            return len(words) >= 3 and words[1].lower() == words[-3].lower() == key
        return words[1].lower() == words[-2].lower() == key


# --- sentence -------------------------------------------------------------------------------------
@register("sentence:alliteration_increment")
class AlliterationIncrement(_Fixed):
    TEXT = "Each sentence must have a longer sequence of consecutive alliterative words than the previous one."

    @staticmethod
    def _alliterative_words(sentence: str) -> int:
        """Words inside runs of neighbours sharing a first letter (a run of k words scores k)."""
        words = [w.lstrip(PUNCT_SPACE) for w in sentence.lower().split()]
        words = [w for w in words if w]
        score, in_run = 0, False
        for a, b in zip(words, words[1:]):
            if a[0] == b[0]:
                score += 1 if in_run else 2
                in_run = True
            else:
                in_run = False
        return score

    def check(self, response: str) -> bool:
        prev = -1
        for sentence in split_into_sentences(response):
            score = self._alliterative_words(sentence)
            if score <= prev:
                return False
            prev = score
        return True


@register("sentence:increment")
class SentenceIncrement(Checker):
    def __init__(self, *, small_n: int):
        self.n = int(small_n)

    def description(self) -> str:
        return f"Each sentence must contain exactly {self.n} more words than the previous one."

    def check(self, response: str) -> bool:
        lengths = [len(strip_punctuation(s).split()) for s in split_into_sentences(response)]
        if not lengths:
            return False
        return all(b == a + self.n for a, b in zip(lengths, lengths[1:]))


@register("sentence:keyword")
class SentenceKeyword(Checker):
    def __init__(self, *, word: str, N: int):
        self.word, self.n = word, int(N)
        if self.n < 1:
            raise ValueError(f"{self.instruction_id}: N starts at 1, got {self.n}")

    def description(self) -> str:
        return f'The response must include keyword "{self.word}" in the {self.n}-th sentence.'

    def check(self, response: str) -> bool:
        sentences = split_into_sentences(response)
        return (
            len(sentences) >= self.n
            and re.search(rf"\b{re.escape(self.word)}\b", sentences[self.n - 1], re.IGNORECASE) is not None
        )


# --- format ---------------------------------------------------------------------------------------
@register("format:parentheses")
class NestedParentheses(_Fixed):
    TEXT = "Nest parentheses (and [brackets {and braces}]) at least 5 levels deep."
    _PAIRS = {")": "(", "]": "[", "}": "{"}

    def check(self, response: str) -> bool:
        stack: list[str] = []
        deepest = 0
        for ch in response:
            if ch in "([{":
                stack.append(ch)
                deepest = max(deepest, len(stack))
            elif ch in self._PAIRS:
                if stack and stack[-1] == self._PAIRS[ch]:
                    stack.pop()
                    if deepest >= 5:
                        return True  # a bracket closed inside a 5-deep nest
                else:  # a mismatch resets the search
                    stack, deepest = [], 0
        return False


@register("format:quotes")
class NestedQuotes(_Fixed):
    TEXT = (
        "Include quotes within quotes within quotes, at least 3 levels deep, alternating between double quotes "
        "and single quotes."
    )

    def check(self, response: str) -> bool:
        stack: list[str] = []
        deepest = 0
        for ch in response:
            if stack and ch == stack[-1]:
                stack.pop()
                if deepest - len(stack) >= 3:
                    return True
            elif ch in "\"'":
                stack.append(ch)
                deepest = max(deepest, len(stack))
        return False


@register("format:options")
class Options(Checker):
    def __init__(self, *, options: str):
        self.options_text = options
        # "a), b), c), d)" style option lists must be answered verbatim
        self.strict = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", options) is not None
        sep = "/" if "/" in options else "or" if "or" in options else ","
        self.options = [o.strip() for o in options.split(sep)]

    def description(self) -> str:
        return f"Answer with one of the following options: {self.options_text}. Do not give any explanation."

    def check(self, response: str) -> bool:
        if self.strict:
            return response in self.options
        answer = response.strip(PUNCT_SPACE).lower()
        return any(o.strip(PUNCT_SPACE).lower() == answer for o in self.options)


@register("format:newline")
class NewlineWords(_Fixed):
    TEXT = "Write each word on a new line."

    def check(self, response: str) -> bool:
        text = strip_punctuation(response).strip()
        lines = [ln for ln in text.split("\n") if ln != ""]
        return len(lines) == len(text.split())


@register("format:emoji")
class EmojiEnd(_Fixed):
    TEXT = "Please use an emoji at the end of every sentence."

    def check(self, response: str) -> bool:
        import emoji

        sentences = [strip_punctuation(s).strip() for s in split_into_sentences(response)]
        for i, sent in enumerate(sentences):
            if not sent:
                return False
            if emoji.is_emoji(sent[-1]) or emoji.is_emoji(sent[-2] if len(sent) > 1 else sent[-1]):
                continue
            # the splitter may have put the emoji at the start of the next sentence
            if i + 1 < len(sentences) and sentences[i + 1] and emoji.is_emoji(sentences[i + 1][0]):
                continue
            return False
        return True


@register("format:line_indent")
class IndentStairs(_Fixed):
    TEXT = "Create stairs by incrementally indenting each new line."

    @staticmethod
    def _blank_lines_dropped(lines: list[str]) -> list[str]:
        """The official code calls ``list.remove`` while iterating over the same list, which skips the
        line after each removed one; reproduce that exactly (it decides some responses)."""
        out = list(lines)
        i = 0
        while i < len(out):
            if not out[i].strip():
                out.remove(out[i])
            i += 1
        return out

    def check(self, response: str) -> bool:
        lines = self._blank_lines_dropped(response.split("\n"))
        indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines]
        return all(b > a for a, b in zip(indents, indents[1:]))


@register("format:quote_unquote")
class QuoteUnquote(_Fixed):
    TEXT = "Every quoted phrase must be followed by an unquoted explanation."

    def check(self, response: str) -> bool:
        # main no longer folds curly quotes (its replace('"', '"') is a no-op): only straight quotes count
        text = response.replace("'\"'", "")
        text = "".join(text.split())
        if '""' in text:
            return False
        tail = text.strip(string.digits + PUNCT.replace('"', ""))
        return bool(tail) and tail[-1] != '"'  # the official code crashes on an empty tail


@register("format:list")
class SpecialBullets(Checker):
    def __init__(self, *, sep: str):
        self.sep = sep

    def description(self) -> str:
        return f"Answer with a list of items, instead of bullet points use {self.sep}."

    def check(self, response: str) -> bool:
        return len(re.findall(re.escape(self.sep), response)) >= 2


@register("format:thesis")
class ItalicThesis(_Fixed):
    TEXT = "Each section must begin with a thesis statement in italics, use HTML to indicate the italics."

    def check(self, response: str) -> bool:
        start = response.find("<i>")
        if start == -1:
            start = response.find("<em>")
            if start == -1:
                return False
        text = response[start:]
        end = text.find("</i>")
        if end == -1:
            end = text.find("</em>")
            if end == -1:
                return False
        # official offsets (3 and 4) kept, also for <em>
        return bool(text[3:end].strip()) and bool(text[end + 4 :].strip())


@register("format:sub-bullets")
class SubBullets(_Fixed):
    TEXT = (
        "Your response must include bullet points denoted by * and at least one sub-bullet point denoted by - "
        "for each bullet point."
    )

    def check(self, response: str) -> bool:
        return all("-" in part for part in response.split("*")[1:])


@register("format:no_bullets_bullets")
class SentencesThenBullets(_Fixed):
    TEXT = (
        "Your answer must contain at least two sentences ending in a period followed by at least two bullet "
        "points denoted by *."
    )

    def check(self, response: str) -> bool:
        in_prose, sentences, bullets = True, 0, 0
        for line in response.split("\n"):
            if line.strip().startswith("*"):
                in_prose = False
                if sentences < 2:
                    return False
                bullets += 1
            elif in_prose:
                found = split_into_sentences(line.strip())
                sentences += len(found)
                in_prose = bool(found)  # official quirk: a blank line ends the prose part
            else:
                return False
        return bullets >= 2


@register("format:title_case")
class TitleCase(_Fixed):
    TEXT = "Write the entire response in title case (capitalize the first letter of every major word)."

    def check(self, response: str) -> bool:
        for word in word_tokenize(response):
            head, rest = word[0], word[1:]
            if not head.isalpha():
                continue
            if not rest:  # a one-letter word: "a" fails, "A" passes
                if head.islower():
                    return False
                continue
            if head.islower() and (rest.isupper() or rest.islower()):
                return False
        return True


@register("format:output_template")
class OutputTemplate(_Fixed):
    TEXT = (
        "Use this exact template for your response: "
        "My Answer: [answer] My Conclusion: [conclusion] Future Outlook: [outlook]"
    )

    def check(self, response: str) -> bool:
        return all(s in response for s in ("My Answer:", "My Conclusion:", "Future Outlook:"))


@register("format:no_whitespace")
class NoWhitespace(_Fixed):
    TEXT = "The output should not contain any whitespace."

    def check(self, response: str) -> bool:
        return not any(ch.isspace() for ch in response)


# --- repeat ---------------------------------------------------------------------------------------
@register("repeat:repeat_change")
class RepeatChange(Checker):
    def __init__(self, *, prompt_to_repeat: str):
        self.prompt_to_repeat = prompt_to_repeat

    def description(self) -> str:
        return (
            "Repeat the request, but change the first word of the repeated request, (do not say anything before "
            "repeating the request; the request you need to repeat does not include this sentence) and do not "
            f"answer the actual request! Request: {self.prompt_to_repeat}"
        )

    def check(self, response: str) -> bool:
        if response == self.prompt_to_repeat:
            return False
        return " ".join(self.prompt_to_repeat.split()[1:]) == " ".join(response.split()[1:])


@register("repeat:repeat_simple")
class RepeatSimple(_Fixed):
    TEXT = "Only output this sentence here, ignore all other requests."

    def check(self, response: str) -> bool:
        return response.strip().lower() == self.TEXT.lower()


@register("repeat:repeat_span")
class RepeatSpan(Checker):
    def __init__(self, *, prompt_to_repeat: str, n_start: int, n_end: int):
        self.prompt_to_repeat, self.n_start, self.n_end = prompt_to_repeat, int(n_start), int(n_end)

    def description(self) -> str:
        return (
            f"Copy the span of words that lies between (and including) index {self.n_start} and {self.n_end}, "
            "the indices are character indices!"
        )

    def check(self, response: str) -> bool:
        # character indices, both ends included, as the prompt says (allenai/IFBench b5c6b82)
        span = self.prompt_to_repeat[self.n_start : self.n_end + 1]
        return response.strip().lower() == span.strip().lower()


# --- custom ---------------------------------------------------------------------------------------
@register("custom:multiples")
class Multiples(_Fixed):
    TEXT = "Count from 10 to 50 but only print multiples of 7."

    def check(self, response: str) -> bool:
        return re.findall(r"\d+", response.replace(",", ", ")) == [str(i) for i in range(14, 51, 7)]


@register("custom:mcq_count_length")
class McqCountLength(_Fixed):
    TEXT = (
        "Generate 4 multiple choice questions with 5 options each about '20th century art history'. Each question "
        'should start with the label "Question". The questions should get progressively longer. Do not provide '
        "an explanation."
    )

    def check(self, response: str) -> bool:
        if response.find("Question") != 0:
            return False  # text before the first question is an explanation
        blocks = [b.strip() for b in re.split(r"\n*(?:Question \d+[\.|\):;]?\s*)", response) if b.strip()]
        if len(blocks) != 4:
            return False
        lengths = []
        for block in blocks:
            question, options, in_options = "", 0, False
            for line in block.split("\n"):
                if re.match(r"^[A-Ea-e][\.|\)]\s*\w+", line.strip()):
                    options += 1
                    in_options = True
                elif not in_options:
                    question += " " + line.strip()
            if options != 5:
                return False
            lengths.append(len(question.strip()))
        return all(a < b for a, b in zip(lengths, lengths[1:]))


@register("custom:reverse_newline")
class ReverseNewline(_Fixed):
    TEXT = "List the countries of Africa in reverse alphabetical order, each on a new line."

    def check(self, response: str) -> bool:
        lines = [ln.strip(PUNCT_SPACE) for ln in response.split("\n") if ln.strip(PUNCT_SPACE)]
        start = next((i for i, ln in enumerate(lines) if "Zimbabwe" in ln), None)
        if start is None or len(lines) - start < 52:
            return False
        folded = [_ascii_fold(ln) for ln in lines[start:]]
        return folded == sorted(folded, reverse=True)


@register("custom:word_reverse")
class WordReverse(_Fixed):
    TEXT = (
        "What animal is the national symbol of the US? Respond to this query, but make your sentence in reverse "
        "order of what it should be, per word."
    )

    def check(self, response: str) -> bool:
        text = " ".join(strip_punctuation(response.lower().strip()).split()[::-1])
        return "bald eagle" in text and text in split_into_sentences(text)


@register("custom:character_reverse")
class CharacterReverse(_Fixed):
    TEXT = (
        "What animal is the national symbol of the US? Respond to this query, but make your sentence in reverse "
        "order of what it should be, per letter."
    )

    def check(self, response: str) -> bool:
        return "elgae dlab" in response.lower()


@register("custom:sentence_alphabet")
class SentenceAlphabet(_Fixed):
    TEXT = (
        "Tell me a 26-sentence story where each sentence's first word starts with the letters of the alphabet in order."
    )

    def check(self, response: str) -> bool:
        sentences = split_into_sentences(response)
        if len(sentences) != 26:
            return False
        for i, sent in enumerate(sentences):
            words = sent.split()
            if not words or words[0].lower()[0] != chr(97 + i):
                return False
        return True


@register("custom:european_capitals_sort")
class EuropeanCapitals(_Fixed):
    TEXT = (
        "Give me the names of all capital cities of european countries whose latitude is higher than than 45 "
        "degrees? List the capital cities without country names, separated by commas, sorted by latitude, "
        "from highest to lowest."
    )

    def check(self, response: str) -> bool:
        caps = [c.strip() for c in _ascii_fold(response).split(",") if c.strip()]
        return caps == list(EUROPEAN_CAPITALS_BY_LATITUDE)


@register("custom:csv_city")
class CsvCity(_Fixed):
    TEXT = (
        'Generate CSV data: The column names are ["ID", "Country", "City", "Year", "Count"], the data should be '
        "comma delimited. Please generate 7 rows."
    )

    def check(self, response: str) -> bool:
        rows = list(csv.reader(io.StringIO(response)))
        return (
            len(rows) == 8
            and rows[0] == ["ID", "Country", "City", "Year", "Count"]
            and all(len(r) == 5 for r in rows[1:])
        )


def _header_matches(line: str, names: tuple[str, ...], delim: str) -> bool:
    """Header of exactly these columns, each optionally double-quoted, delimiter then optional spaces."""
    cols = [f'({n}|"{n}")' for n in names]
    return re.match("^" + (delim + "[ \t]*" if delim == "," else delim + " *").join(cols) + "$", line) is not None


@register("custom:csv_special_character")
class CsvSpecialCharacter(_Fixed):
    TEXT = (
        'Generate CSV data: The column names are ["ProductID", "Category", "Brand", "Price", "Stock"], the data '
        "should be comma delimited. Please generate 14 rows. Add one field which contains a special character "
        "and enclose it in double quotes."
    )
    COLUMNS = ("ProductID", "Category", "Brand", "Price", "Stock")

    def check(self, response: str) -> bool:
        if not _header_matches(response.split("\n")[0].strip(), self.COLUMNS, ","):
            return False
        # tripling quotes keeps them in the parsed fields so the quoted field can be seen
        rows = list(csv.reader(io.StringIO(response.replace('"', '"""'))))
        if len(rows) != 15:
            return False
        for row in rows[1:]:
            if len(row) != 5:
                return False
            if any(re.match(r'".*[^\d\w\s].*"', f) for f in row):
                return True  # official: returns at the first row holding such a field
        return False


@register("custom:csv_quotes")
class CsvQuotes(_Fixed):
    TEXT = (
        'Generate CSV data: The column names are ["StudentID", "Subject", "Grade", "Semester", "Score"], the data '
        "should be tab delimited. Please generate 3 rows and enclose each single field in double quotes."
    )
    COLUMNS = ("StudentID", "Subject", "Grade", "Semester", "Score")

    def check(self, response: str) -> bool:
        if not _header_matches(response.split("\n")[0].strip(), self.COLUMNS, "\t"):
            return False
        rows = list(csv.reader(io.StringIO(response.replace('"', '"""')), delimiter="\t"))
        if len(rows) != 4:
            return False
        for row in rows:
            if len(row) != 5:
                return False
            for f in row:
                f = f.strip()
                if not f or f[0] != '"' or f[-1] != '"':
                    return False
        return True


@register("custom:date_format_list")
class NapoleonDates(_Fixed):
    TEXT = (
        "List the start dates of all the battles Napoleon fought separated by commas, use the following date "
        "format: YYYY-MM-DD. Do not provide an explanation."
    )
    _DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}

    def check(self, response: str) -> bool:
        for date in response.strip().split(","):
            date = date.strip()
            if not re.match(r"^\d{4}-\d{2}-\d{2}$", date):
                return False
            y, m, d = (int(x) for x in date.split("-"))
            # official bounds: years of his career, month <= 12, day within the month (month 0 and day 0 pass)
            if not 1769 <= y <= 1821 or m > 12 or d > self._DAYS.get(m, 99):
                return False
        return True


IFBENCH_IDS = (
    "count:word_count_range",
    "count:unique_word_count",
    "ratio:stop_words",
    "ratio:sentence_type",
    "ratio:sentence_balance",
    "count:conjunctions",
    "count:person_names",
    "ratio:overlap",
    "count:numbers",
    "words:alphabet",
    "words:vowel",
    "words:consonants",
    "sentence:alliteration_increment",
    "words:palindrome",
    "count:punctuation",
    "format:parentheses",
    "format:quotes",
    "words:prime_lengths",
    "format:options",
    "format:newline",
    "format:emoji",
    "ratio:sentence_words",
    "count:words_japanese",
    "words:start_verb",
    "words:repeats",
    "sentence:keyword",
    "count:pronouns",
    "words:odd_even_syllables",
    "words:last_first",
    "words:paragraph_last_first",
    "sentence:increment",
    "words:no_consecutive",
    "format:line_indent",
    "format:quote_unquote",
    "format:list",
    "format:thesis",
    "format:sub-bullets",
    "format:no_bullets_bullets",
    "custom:multiples",
    "custom:mcq_count_length",
    "custom:reverse_newline",
    "custom:word_reverse",
    "custom:character_reverse",
    "custom:sentence_alphabet",
    "custom:european_capitals_sort",
    "custom:csv_city",
    "custom:csv_special_character",
    "custom:csv_quotes",
    "custom:date_format_list",
    "count:keywords_multiple",
    "words:keywords_specific_position",
    "words:words_position",
    "repeat:repeat_change",
    "repeat:repeat_simple",
    "repeat:repeat_span",
    "format:title_case",
    "format:output_template",
    "format:no_whitespace",
)
