# Arrivals at the dependency per 10 ms, one panel per retry strategy.
# Written by herd; render with: gnuplot arrivals.gp
set terminal pngcairo size 1100,280 font 'sans,9'
set output 'arrivals.png'
set datafile separator ','
set key top right
set grid
set xrange [0:*]
set yrange [0:1000]
set arrow from 10000,graph 0 to 10000,graph 1 nohead dashtype 2 lc rgb '#888888'
set multiplot layout 1,1 title '1000 clients over 10 processes, dependency down for 10000 ms then 100 at a time: calls arriving per 10 ms'
set title 'full'
set xlabel 'virtual time, ms'
set ylabel 'calls / 10 ms'
plot 'outage_arrivals.csv' using 1:2 skip 1 with steps lw 1.2 lc rgb '#1f77b4' title 'neither local', 'outage_arrivals.csv' using 1:3 skip 1 with steps lw 1.2 lc rgb '#d62728' title 'budget local', 'outage_arrivals.csv' using 1:4 skip 1 with steps lw 1.2 lc rgb '#2ca02c' title 'gate local', 'outage_arrivals.csv' using 1:5 skip 1 with steps lw 1.2 lc rgb '#9467bd' title 'budget+gate local', 'outage_arrivals.csv' using 1:6 skip 1 with steps lw 1.2 dt 2 lc rgb '#1f77b4' title 'neither shared', 'outage_arrivals.csv' using 1:7 skip 1 with steps lw 1.2 dt 2 lc rgb '#d62728' title 'budget shared', 'outage_arrivals.csv' using 1:8 skip 1 with steps lw 1.2 dt 2 lc rgb '#2ca02c' title 'gate shared', 'outage_arrivals.csv' using 1:9 skip 1 with steps lw 1.2 dt 2 lc rgb '#9467bd' title 'budget+gate shared'
unset multiplot
