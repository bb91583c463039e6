-- exported rows, no schema
INSERT INTO faq (question, answer) VALUES ('what is lima ?', 'a city');
INSERT INTO faq (question, answer) VALUES ('null answer', NULL);
INSERT INTO faq (question, answer) VALUES ('blob answer', X'6869');
INSERT INTO faq (question, answer) VALUES ('it''s empty', '   ');
INSERT INTO faq (question, answer) VALUES ('what is a fox ?', 'a pet; maybe');
