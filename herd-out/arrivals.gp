# Arrivals at the dependency per 10 ms, one panel per retry strategy.
# Written by herd; render with: gnuplot arrivals.gp
set terminal pngcairo size 1100,1160 font 'sans,9'
set output 'arrivals.png'
set datafile separator ','
set key top right
set grid
set xrange [0:*]
set yrange [0:1000]
set arrow from 2000,graph 0 to 2000,graph 1 nohead dashtype 2 lc rgb '#888888'
set multiplot layout 5,1 title '1000 clients, dependency down for 2000 ms then 100 at a time: calls arriving per 10 ms'
set title 'no-backoff'
unset xlabel
set ylabel 'calls / 10 ms'
plot 'outage_arrivals.csv' using 1:2 skip 1 with steps lw 1.2 lc rgb '#1f77b4' title 'neither', 'outage_arrivals.csv' using 1:7 skip 1 with steps lw 1.2 lc rgb '#d62728' title 'budget', 'outage_arrivals.csv' using 1:12 skip 1 with steps lw 1.2 lc rgb '#2ca02c' title 'gate', 'outage_arrivals.csv' using 1:17 skip 1 with steps lw 1.2 lc rgb '#9467bd' title 'budget+gate'
set title 'exponential'
unset xlabel
set ylabel 'calls / 10 ms'
plot 'outage_arrivals.csv' using 1:3 skip 1 with steps lw 1.2 lc rgb '#1f77b4' title 'neither', 'outage_arrivals.csv' using 1:8 skip 1 with steps lw 1.2 lc rgb '#d62728' title 'budget', 'outage_arrivals.csv' using 1:13 skip 1 with steps lw 1.2 lc rgb '#2ca02c' title 'gate', 'outage_arrivals.csv' using 1:18 skip 1 with steps lw 1.2 lc rgb '#9467bd' title 'budget+gate'
set title 'full'
unset xlabel
set ylabel 'calls / 10 ms'
plot 'outage_arrivals.csv' using 1:4 skip 1 with steps lw 1.2 lc rgb '#1f77b4' title 'neither', 'outage_arrivals.csv' using 1:9 skip 1 with steps lw 1.2 lc rgb '#d62728' title 'budget', 'outage_arrivals.csv' using 1:14 skip 1 with steps lw 1.2 lc rgb '#2ca02c' title 'gate', 'outage_arrivals.csv' using 1:19 skip 1 with steps lw 1.2 lc rgb '#9467bd' title 'budget+gate'
set title 'equal'
unset xlabel
set ylabel 'calls / 10 ms'
plot 'outage_arrivals.csv' using 1:5 skip 1 with steps lw 1.2 lc rgb '#1f77b4' title 'neither', 'outage_arrivals.csv' using 1:10 skip 1 with steps lw 1.2 lc rgb '#d62728' title 'budget', 'outage_arrivals.csv' using 1:15 skip 1 with steps lw 1.2 lc rgb '#2ca02c' title 'gate', 'outage_arrivals.csv' using 1:20 skip 1 with steps lw 1.2 lc rgb '#9467bd' title 'budget+gate'
set title 'decorrelated'
set xlabel 'virtual time, ms'
set ylabel 'calls / 10 ms'
plot 'outage_arrivals.csv' using 1:6 skip 1 with steps lw 1.2 lc rgb '#1f77b4' title 'neither', 'outage_arrivals.csv' using 1:11 skip 1 with steps lw 1.2 lc rgb '#d62728' title 'budget', 'outage_arrivals.csv' using 1:16 skip 1 with steps lw 1.2 lc rgb '#2ca02c' title 'gate', 'outage_arrivals.csv' using 1:21 skip 1 with steps lw 1.2 lc rgb '#9467bd' title 'budget+gate'
unset multiplot
